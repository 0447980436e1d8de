/* embed_graph.S — puts a compiled .graph file into the program's read-only
 * data, as a deployment ships it: no file to find at run time. GRAPH_FILE
 * is set by the Makefile. */
	.section .rodata
	.balign 64
	.global dtpc_embedded_graph
dtpc_embedded_graph:
	.incbin GRAPH_FILE
	.global dtpc_embedded_graph_end
dtpc_embedded_graph_end:
	.section .note.GNU-stack, "", @progbits
