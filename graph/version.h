/* version.h — the compiler's version (also written into graph metadata). */
#ifndef DTPC_VERSION_H
#define DTPC_VERSION_H
#define DTPC_VERSION "0.1.0"
#endif
