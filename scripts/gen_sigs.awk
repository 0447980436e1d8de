# gen_sigs.awk — the language's op signatures as a C table, made at build
# time from graph/ops.def (the one table of ops), so the compiler holds no
# lazily filled global: `awk -f scripts/gen_sigs.awk graph/ops.def`; with
# `-v max=1`, only SIG_MAX, the length of the longest signature (op_compile.h
# sizes the table's rows with it).
#
# An OP (or UNARY) line ends with its signature, "name:kind[=default], ..."; `*:t` is a
# variadic list of tensors, named "inputs" in messages.
BEGIN {
	if (max)
		print "/* op_sig_max.h — generated from graph/ops.def by scripts/gen_sigs.awk */"
	else {
		print "/* op_sigs.h — generated from graph/ops.def by scripts/gen_sigs.awk */"
		print "static const struct sig sigs[OP_COUNT] = {"
	}
	longest = 0
}
/^(OP|UNARY)\(/ {
	name = $0
	sub(/^(OP|UNARY)\( */, "", name)
	sub(/ *,.*/, "", name)
	sig = $0
	sub(/^[^"]*"/, "", sig)
	sub(/".*$/, "", sig)
	n = split(sig, params, /, */)
	line = "\t[OP_" name "] = { {"
	count = 0
	for (i = 1; i <= n; i++) {
		if (params[i] == "")
			continue
		p = params[i]
		pname = p; sub(/:.*/, "", pname)
		kind = p; sub(/^[^:]*:/, "", kind); def = kind
		sub(/=.*/, "", kind)
		if (def ~ /=/) { sub(/^[^=]*=/, "", def); def = "\"" def "\"" } else def = "NULL"
		variadic = pname == "*" ? "true" : "false"
		if (pname == "*")
			pname = "inputs"
		line = line (count ? ", " : " ") "{ \"" pname "\", '" kind "', " def ", " variadic " }"
		count++
	}
	if (count > longest)
		longest = count
	# ops that plans cannot name (graph-only ops) have no signature: zero
	if (count && !max)
		print line " }, " count " },"
}
END {
	if (max)
		print "enum { SIG_MAX = " longest " };"
	else
		print "};"
}
