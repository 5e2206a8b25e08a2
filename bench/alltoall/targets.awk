# targets.awk: issue 24's targets from the tables bench/alltoall/run
# prints (see bench/alltoall/targets). Cells missing or failed show as
# "missing"; a target is "met" or "NOT met" only when its cells are there.

function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function num(s) { return s ~ /^-?[0-9.]+$/ }
function median(list,    a, b, n, m, i, j, t) {
	m = split(list, b, " ")
	n = 0
	for (i = 1; i <= m; i++) if (num(b[i])) a[++n] = b[i] # "failed" runs left out
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	if (n == 0) return ""
	return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
}
function row(target, measured, goal, ok) {
	printf "| %s | %s | %s | %s |\n", target, measured, goal, ok
}
function verdict(cond) { return cond ? "met" : "NOT met" }

/^\|/ {
	n = split($0, f, "|")
	for (i = 2; i < n; i++) c[i - 1] = trim(f[i])
	if (c[1] ~ /^[0-9]+$/ && n == 10) { # N | loss | bytes | proto | ms | p50 | p99 | repairs
		k = c[1] SUBSEP c[2] SUBSEP c[3] SUBSEP c[4]
		if (num(c[5])) { ms[k] = c[5]; p99[k] = c[7] }
		if (!(c[3] in sizes)) { sizes[c[3]] = 1; order[++nsizes] = c[3] }
	} else if ((c[1] == "jacobi" || c[1] == "cg") && n == 6) { # program | loss | barriers | ms per run
		secs[c[1] SUBSEP c[2] SUBSEP (c[3] == "-noexpect" ? "without" : "with")] = median(c[4])
	}
}

END {
	print "| target | measured | goal | |"
	print "|---|---|---|---|"
	# 1. Growth of ms per call from N = 2 to 8, lossless, against the TCP mesh's.
	for (si = 1; si <= nsizes; si++) {
		s = order[si]
		for (t = 1; t <= 2; t++) {
			tcp = "tcp" t
			a2 = "2" SUBSEP "0" SUBSEP s SUBSEP "pcode"; a8 = "8" SUBSEP "0" SUBSEP s SUBSEP "pcode"
			t2 = "2" SUBSEP "0" SUBSEP s SUBSEP tcp; t8 = "8" SUBSEP "0" SUBSEP s SUBSEP tcp
			name = sprintf("growth of ms per call N = 2→8, %s B, 0 %%: pcode / %s", s, tcp)
			if (!((a2 in ms) && (a8 in ms) && (t2 in ms) && (t8 in ms))) { row(name, "missing", "≤ 0.33", ""); continue }
			gp = ms[a8] - ms[a2]; gt = ms[t8] - ms[t2]
			if (gt <= 0) {
				row(name, sprintf("pcode %+.4f ms, %s %+.4f ms (TCP does not grow)", gp, tcp, gt), "≤ 0.33", "n/a")
				continue
			}
			row(name, sprintf("%.2f (pcode %+.4f ms, %s %+.4f ms)", gp / gt, gp, tcp, gt), "≤ 0.33", verdict(gp / gt <= 1 / 3))
		}
	}
	# 2. p99 round time at 1 % loss with request NACKs against PBP2 without.
	for (si = 1; si <= nsizes; si++) {
		s = order[si]
		for (nn = 2; nn <= 8; nn *= 2) {
			b = nn SUBSEP "1" SUBSEP s SUBSEP "pbp2"
			for (pi = 1; pi <= 2; pi++) {
				p = pi == 1 ? "pbp2-expect" : "pcode"
				k = nn SUBSEP "1" SUBSEP s SUBSEP p
				name = sprintf("p99 round at 1 %%, N = %d, %s B: %s / pbp2", nn, s, p)
				if (!((k in p99) && (b in p99)) || p99[b] <= 0) { row(name, "missing", "≤ 0.5", ""); continue }
				row(name, sprintf("%.2f (%s µs / %s µs)", p99[k] / p99[b], p99[k], p99[b]), "≤ 0.5", verdict(p99[k] / p99[b] <= 0.5))
			}
		}
	}
	# 3. PCODE against MPI_Allgather at N = 8, 1 KB (lossless is the target; 1 % shown).
	for (l = 0; l <= 1; l++) {
		k = "8" SUBSEP l SUBSEP "1024" SUBSEP "pcode"; m = "8" SUBSEP l SUBSEP "1024" SUBSEP "mpi"
		name = sprintf("ms per call N = 8, 1 KB, %d %%: pcode / mpi", l)
		if (!((k in ms) && (m in ms)) || ms[m] <= 0) { row(name, "missing", "≤ 1", ""); continue }
		row(name, sprintf("%.2f (%s / %s ms)", ms[k] / ms[m], ms[k], ms[m]), "≤ 1", verdict(ms[k] / ms[m] <= 1))
	}
	# 4. jacobi and cg: Expect's gain (median of the runs).
	split("jacobi cg", progs, " ")
	for (pi = 1; pi <= 2; pi++) {
		for (l = 1; l >= 0; l--) {
			w = progs[pi] SUBSEP l SUBSEP "with"; wo = progs[pi] SUBSEP l SUBSEP "without"
			name = sprintf("%s at %d %%: 1 − time with Expect / without", progs[pi], l)
			goal = l ? "≥ 0.20" : "≈ 0 (no change)"
			if (!((w in secs) && (wo in secs)) || secs[wo] <= 0) { row(name, "missing", goal, ""); continue }
			g = 1 - secs[w] / secs[wo]
			ok = l ? verdict(g >= 0.20) : (g < -0.05 ? "NOT met (slower)" : g > 0.05 ? "faster by more than 5 %" : "met (within 5 %)")
			row(name, sprintf("%+.2f (%.1f ms / %.1f ms, medians)", g, secs[w], secs[wo]), goal, ok)
		}
	}
}
