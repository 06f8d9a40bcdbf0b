#!/usr/bin/env python3
"""Turns the results of one benchmark run into a report.

Input: the JSON lines pheap_bench appended (--lines), those of the back-end
table (--backends), of pheap_kvbench (--kv) and of pheap_cppbench (--cpp), plus facts about the run
(--meta key=value), which together become the run's JSON file (--json); or an
existing run JSON to render again.  Output in --out: report.md (tables) and
PNG charts drawn with gnuplot (throughput against threads per workload,
latency percentiles of the fixed-size workloads).  --summary copies
report.md to the committed summary file.

Standard library only; gnuplot is optional (charts are skipped without it).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ORDER = ["pheap", "pheap-gc", "pheap-noprot", "pheap-keys", "pheap-nomorph", "pheap-defrag", "pmemobj",
         "pmemobj-defrag", "mimalloc", "jemalloc", "glibc"]
PEERS = ["pmemobj", "mimalloc"]          # ratio columns are against these
COLORS = {"pheap": "#d62728", "pheap-gc": "#e377c2", "pheap-noprot": "#8c564b", "pheap-keys": "#bcbd22",
          "pmemobj": "#1f77b4", "mimalloc": "#2ca02c",
          "jemalloc": "#ff7f0e", "glibc": "#7f7f7f"}   # the same in every chart
LAT_KEYS = ["p50", "p99", "p999", "max"]
LAT_LABELS = ["p50", "p99", "p99.9", "max"]


def load_lines(path):
    results = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                results.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"report: {path}:{n}: bad JSON line: {e}")
    return results


def load_run(args):
    if args.lines:
        meta = {}
        for kv in args.meta or []:
            key, _, value = kv.partition("=")
            meta[key] = value
        run = {"meta": meta, "results": load_lines(args.lines)}
        if args.backends:
            run["backends"] = load_lines(args.backends)
        if args.kv:
            run["kv"] = load_lines(args.kv)
        if args.cpp and os.path.exists(args.cpp):
            run["cpp"] = load_lines(args.cpp)
        with open(args.json, "w") as f:
            json.dump(run, f, indent=1)
            f.write("\n")
        return run
    with open(args.json) as f:
        return json.load(f)


def alloc_order(results):
    seen = {r["alloc"] for r in results}
    return [a for a in ORDER if a in seen] + sorted(seen - set(ORDER))


def workload_order(results):
    out = []
    for r in results:
        if r["workload"] not in out:
            out.append(r["workload"])
    return out


def metric(r, name, field="median"):
    m = r.get("metrics", {}).get(name)
    return None if m is None else m.get(field)


def si(v, unit=""):
    if v is None:
        return "—"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}".rstrip()


def mib(v):
    return "—" if v is None else f"{v / 1048576:.1f}"


def fixed(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def index(results):
    """(workload, threads, alloc) -> result, for results that succeeded."""
    return {(r["workload"], r["threads"], r["alloc"]): r
            for r in results if "error" not in r}


def throughput_section(results, allocs, idx):
    lines = []
    points = sorted({(r["workload"], r["threads"]) for r in results
                     if metric(r, "ops_per_s") is not None},
                    key=lambda p: (workload_order(results).index(p[0]), p[1]))
    if not points:
        return ""
    lines.append("## Throughput\n\nAlloc + free calls per second, median of the repetitions "
                 "(min–max in brackets).\n\n")
    rows = []
    for wl, thr in points:
        row = [wl, thr]
        for a in allocs:
            r = idx.get((wl, thr, a))
            med = metric(r, "ops_per_s") if r else None
            if med is None:
                row.append("—")
            else:
                row.append(f"{si(med)} ({si(metric(r, 'ops_per_s', 'min'))}–"
                           f"{si(metric(r, 'ops_per_s', 'max'))})")
        rows.append(row)
    lines.append(table(["workload", "threads"] + allocs, rows))

    ratio_cols, shown = [], set()
    for p in PEERS:
        for a in allocs:
            if p in allocs and a != p and frozenset((a, p)) not in shown:
                ratio_cols.append((a, p))
                shown.add(frozenset((a, p)))
    if ratio_cols:
        lines.append("\n### Ratios to the peers\n\nMedian ops/s of the allocator divided by the "
                     "peer's at the same workload and thread count (above 1: faster).\n\n")
        rows = []
        for wl, thr in points:
            row = [wl, thr]
            for a, p in ratio_cols:
                ra, rp = idx.get((wl, thr, a)), idx.get((wl, thr, p))
                va = metric(ra, "ops_per_s") if ra else None
                vp = metric(rp, "ops_per_s") if rp else None
                row.append("—" if not va or not vp else f"{va / vp:.2f}×")
            rows.append(row)
        lines.append(table(["workload", "threads"] + [f"{a} ÷ {p}" for a, p in ratio_cols],
                           rows))

    counted = [a for a in allocs
               if any(metric(r, "flushes_per_op") is not None
                      for r in results if r["alloc"] == a)]
    for a in counted:
        lines.append(f"\n### Durability work of {a}\n\nCache-line flushes, fences and reflushes "
                     "per alloc or free call (medians); these do not depend on the machine.\n\n")
        rows = []
        for wl, thr in points:
            r = idx.get((wl, thr, a))
            if r and metric(r, "flushes_per_op") is not None:
                rows.append([wl, thr, fixed(metric(r, "flushes_per_op")),
                             fixed(metric(r, "fences_per_op")),
                             fixed(metric(r, "reflushes_per_op"))])
        lines.append(table(["workload", "threads", "flushes/op", "fences/op", "reflushes/op"],
                           rows))
    return "".join(lines)


PROTECTION_TARGET = 0.97   # issue: protection costs at most 3 %


def protection_section(results, idx):
    """pheap (metadata protected) against pheap-noprot (PHEAP_PROTECT=off), same build."""
    points = sorted({(r["workload"], r["threads"]) for r in results
                     if r["alloc"] == "pheap-noprot" and metric(r, "ops_per_s") is not None},
                    key=lambda p: (workload_order(results).index(p[0]), p[1]))
    rows = []
    for wl, thr in points:
        on, off = idx.get((wl, thr, "pheap")), idx.get((wl, thr, "pheap-noprot"))
        if not on or not off or not metric(off, "ops_per_s"):
            continue
        v = metric(on, "ops_per_s") / metric(off, "ops_per_s")
        keys = idx.get((wl, thr, "pheap-keys"))
        kv = metric(keys, "ops_per_s") / metric(off, "ops_per_s") if keys and metric(keys, "ops_per_s") else None
        rows.append([wl, thr, si(metric(on, "ops_per_s")), si(metric(off, "ops_per_s")),
                     f"{v:.3f}× ({'met' if v >= PROTECTION_TARGET else 'missed'})",
                     f"{kv:.3f}×" if kv is not None else "n/a"])
    if not rows:
        return ""
    return ("\n## Protection\n\nMetadata read-only in the program's mapping (`pheap`, the "
            "default: alias) against the same build with `PHEAP_PROTECT=off` (`pheap-noprot`): median "
            f"ops/s and their ratio (target at least {PROTECTION_TARGET}: protection costs at most "
            "3 %); the last column is `pheap-keys` (`PHEAP_PROTECT=keys`, n/a where the machine has "
            "no protection keys) against the same. The key-value workload's row is "
            "`pheap-redo ÷ pheap-redo-noprot` in the transactions section.\n\n"
            + table(["workload", "threads", "protected", "off", "protected ÷ off", "keys ÷ off"], rows))


def latency_section(results, allocs):
    rows = []
    for r in results:
        if "error" in r or metric(r, "alloc_p50_ns") is None:
            continue
        row = [r["workload"], r["threads"], r["alloc"]]
        for kind in ("alloc", "free"):
            row.append(" / ".join(fixed(metric(r, f"{kind}_{k}_ns"), 0) for k in LAT_KEYS))
        rows.append(row)
    if not rows:
        return ""
    order = workload_order(results)
    rows.sort(key=lambda x: (order.index(x[0]), x[1], allocs.index(x[2])))
    timer = [metric(r, "timer_ns") for r in results if metric(r, "timer_ns") is not None]
    note = f" Each sample includes one clock reading (about {min(timer):.0f} ns)." if timer else ""
    return ("\n## Latency\n\nPer-call latency in ns, p50 / p99 / p99.9 / max (medians of the "
            "repetitions)." + note + "\n\n"
            + table(["workload", "threads", "allocator", "alloc", "free"], rows))


def memory_section(results, allocs):
    rows = []
    for r in results:
        if "error" in r or metric(r, "live_bytes") is None:
            continue
        live = metric(r, "live_bytes")
        heap, file_, rss = (metric(r, k) for k in ("heap_bytes", "file_bytes", "rss_bytes"))
        used = file_ if file_ is not None else rss
        hmax, fmax = (metric(r, k) for k in ("heap_per_live_max", "file_per_live_max"))
        rows.append([r["workload"], r["threads"], r["alloc"], mib(live), mib(heap), mib(file_),
                     mib(rss), "—" if heap is None else f"{heap / live:.2f}",
                     "—" if used is None else f"{used / live:.2f}",
                     "—" if hmax is None else f"{hmax:.2f}", "—" if fmax is None else f"{fmax:.2f}"])
    if not rows:
        return ""
    rows.sort(key=lambda x: (x[0], x[1], allocs.index(x[2])))
    return ("\n## Memory\n\nAt the end of fragbench's last allocation phase, in MiB. heap: the "
            "allocator's own account of what it holds for blocks; file: storage of the heap file "
            "(st_blocks); rss+: growth of resident memory (transient allocators); worst phase: "
            "the largest ratio at the end of any allocation phase. The least any allocator that "
            "never moves a block can reach is pheap_fragbound's (see bench/README.md).\n\n"
            + table(["workload", "threads", "allocator", "live", "heap", "file", "rss+",
                     "heap ÷ live", "(file or rss+) ÷ live", "worst phase heap ÷ live",
                     "worst phase file ÷ live"], rows))


def recovery_section(results, allocs):
    rows = []
    for r in results:
        if "error" in r or metric(r, "crash_open_ns") is None:
            continue
        ms = lambda k: fixed(metric(r, k) / 1e6, 3)
        rows.append([r["alloc"], f"{metric(r, 'live_blocks'):.0f}", ms("crash_open_ns"),
                     ms("crash_first_alloc_ns"), ms("clean_open_ns"), ms("clean_first_alloc_ns")])
    if not rows:
        return ""
    rows.sort(key=lambda x: allocs.index(x[0]))
    return ("\n## Recovery\n\nReopen time in ms with that many live blocks, after SIGKILL and "
            "after a clean close, and the first allocation after the reopen (medians).\n\n"
            + table(["allocator", "live blocks", "open after crash", "first alloc",
                     "open after close", "first alloc"], rows))


def recovery_gc_section(results, allocs):
    rows = []
    for r in results:
        if "error" in r or metric(r, "recover_ns") is None:
            continue
        ms = lambda k: fixed(metric(r, k) / 1e6, 3)
        rows.append([r["alloc"], r["threads"], f"{metric(r, 'reachable_blocks'):.0f}",
                     f"{metric(r, 'garbage_blocks'):.0f}", ms("gc_open_ns"), ms("recover_ns"),
                     fixed(metric(r, "blocks_per_s") / 1e6),
                     fixed(metric(r, "blocks_per_s_core") / 1e6), ms("clean_open_ns")])
    if not rows:
        return ""
    rows.sort(key=lambda x: (allocs.index(x[0]), x[1]))
    return ("\n## Recovery by tracing\n\n`recovery-gc`: after SIGKILL, the open and the trace "
            "from the root (threads: marking threads) in ms, reachable blocks traced per second "
            "(in millions, in all and per core), and the open of the same heap after a clean "
            "close (medians).\n\n"
            + table(["allocator", "threads", "reachable", "garbage", "open after crash",
                     "recover", "M blocks/s", "per core", "open after close"], rows))


def failure_section(results):
    bad = [r for r in results if "error" in r]
    if not bad:
        return ""
    rows = [[r["workload"], r["threads"], r["alloc"], r["error"].replace("|", "/")] for r in bad]
    return "\n## Failures\n\n" + table(["workload", "threads", "allocator", "error"], rows)


# ---- charts ---------------------------------------------------------------

def gnuplot(script):
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True,
                       stdout=subprocess.DEVNULL)
        return True
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"report: gnuplot failed: {e}", file=sys.stderr)
        return False


def color(a):
    return COLORS.get(a, "#9467bd")


def gp_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def throughput_chart(out, wl, results, allocs):
    series = []
    for a in allocs:
        pts = sorted((r["threads"], metric(r, "ops_per_s"), metric(r, "ops_per_s", "min"),
                      metric(r, "ops_per_s", "max"))
                     for r in results
                     if r["workload"] == wl and r["alloc"] == a and "error" not in r
                     and metric(r, "ops_per_s") is not None)
        if pts:
            series.append((a, pts))
    if not series:
        return None
    dat = os.path.join(out, f"throughput-{wl}.dat")
    with open(dat, "w") as f:
        for a, pts in series:
            f.write(f"# {a}\n")
            for p in pts:
                f.write("%d %.6g %.6g %.6g\n" % p)
            f.write("\n\n")
    threads = sorted({p[0] for _, pts in series for p in pts})
    png = f"throughput-{wl}.png"
    plots = ", ".join(
        f"{gp_quote(dat)} index {i} using 1:2:3:4 with yerrorlines lw 2 pt 7 "
        f"lc rgb {gp_quote(color(a))} title {gp_quote(a)}"
        for i, (a, _) in enumerate(series))
    ok = gnuplot(f"""
set terminal pngcairo size 800,500 font "sans,10"
set output {gp_quote(os.path.join(out, png))}
set title {gp_quote(wl + ": throughput against threads (median, min-max bars)")}
set xlabel "threads"
set ylabel "alloc + free calls per second"
set logscale y
set format y "%.0s%c"
set grid ytics mytics
set key outside right top
set xtics ({", ".join(str(t) for t in threads)})
set xrange [{min(threads) - 0.5}:{max(threads) + 0.5}]
plot {plots}
""")
    return png if ok else None


def latency_chart(out, wl, results, allocs):
    chosen = [r for r in results if r["workload"] == wl and "error" not in r
              and metric(r, "alloc_p50_ns") is not None]
    if not chosen:
        return None
    thr = min(r["threads"] for r in chosen)
    rows = [(a, r) for a in allocs for r in chosen if r["alloc"] == a and r["threads"] == thr]
    dat = os.path.join(out, f"latency-{wl}.dat")
    with open(dat, "w") as f:
        f.write("# percentile " + " ".join(f"{a}_alloc {a}_free" for a, _ in rows) + "\n")
        for i, (k, label) in enumerate(zip(LAT_KEYS, LAT_LABELS)):
            vals = []
            for _, r in rows:
                vals += [max(metric(r, f"alloc_{k}_ns"), 1), max(metric(r, f"free_{k}_ns"), 1)]
            f.write(f"{label} " + " ".join("%.6g" % v for v in vals) + "\n")
    png = f"latency-{wl}.png"
    alloc_plot = ", ".join(f"{gp_quote(dat)} using {2 + 2 * i}:xtic(1) "
                           f"lc rgb {gp_quote(color(a))} title {gp_quote(a)}"
                           for i, (a, _) in enumerate(rows))
    free_plot = ", ".join(f"{gp_quote(dat)} using {3 + 2 * i}:xtic(1) "
                          f"lc rgb {gp_quote(color(a))} title {gp_quote(a)}"
                          for i, (a, _) in enumerate(rows))
    ok = gnuplot(f"""
set terminal pngcairo size 1000,450 font "sans,10"
set output {gp_quote(os.path.join(out, png))}
set multiplot layout 1,2 title {gp_quote(f"{wl}: per-call latency at {thr} thread(s), ns (log scale)")}
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [1:*]
set format y "10^{{%L}}"
set grid ytics
set key top left
set title "alloc"
plot {alloc_plot}
set title "free"
plot {free_plot}
unset multiplot
""")
    return png if ok else None


def charts_section(out, results, allocs):
    if shutil.which("gnuplot") is None:
        return "\n## Charts\n\ngnuplot is not installed: no charts.\n"
    pngs = []
    for wl in workload_order(results):
        p = throughput_chart(out, wl, results, allocs)
        if p:
            pngs.append(p)
        p = latency_chart(out, wl, results, allocs)
        if p:
            pngs.append(p)
    if not pngs:
        return ""
    return "\n## Charts\n\n" + "".join(f"![{p}]({p})\n" for p in pngs)


BACKEND_DURABILITY = {
    "msync": "power loss, at every call",
    "none": "process crash only",
    "forced": "process crash only (cache lines reach the page cache)",
}


def backend_durability(label):
    kind = label.split()[-1]
    return BACKEND_DURABILITY.get(kind, "process crash only (cache lines reach the page cache)")


def backends_section(backends, fs_dir):
    """The back-end table: one row per flush configuration on an ordinary file system."""
    if not backends:
        return ""
    labels = []
    for r in backends:
        if r["backend"] not in labels:
            labels.append(r["backend"])
    idx = {(r["backend"], r["workload"], r["threads"]): r for r in backends if "error" not in r}

    def ops(label, wl, thr):
        r = idx.get((label, wl, thr))
        return si(metric(r, "ops_per_s")) if r else "—"

    rows = []
    for label in labels:
        r64 = idx.get((label, "fixed-64", 1))
        lat = "—"
        if r64 and metric(r64, "alloc_p50_ns") is not None:
            lat = (f"{metric(r64, 'alloc_p50_ns') / 1000:.1f} / "
                   f"{metric(r64, 'alloc_p99_ns') / 1000:.1f} µs")
        fences = fixed(metric(r64, "fences_per_op")) if r64 else "—"
        survives = "process crash only (tmpfs)" if "(tmpfs)" in fs_dir else backend_durability(label)
        rows.append([label, survives, ops(label, "fixed-64", 1), lat,
                     ops(label, "threadtest", 1), ops(label, "threadtest", 2), fences])
    return (f"\n## Flush back ends on an ordinary file system\n\nHeaps in {fs_dir}, fewer calls "
            "than above; one process per configuration. `msync` is what pheap chooses by itself "
            "on a file that is not on DAX; the cache-line rows are what a DAX mapping would "
            "run, measured here only for comparison (on this file system they do not reach "
            "the disk).\n\n"
            + table(["configuration", "survives", "fixed-64 ops/s", "alloc p50 / p99",
                     "threadtest t=1", "threadtest t=2", "fences/op"], rows))


KV_VARIANTS = ["pheap-redo", "pheap-undo", "pheap-redo-none", "pheap-redo-noprot", "pmemobj"]
KV_RATIOS = [("pheap-redo", "pmemobj", 1.5), ("pheap-redo", "pheap-redo-none", 0.75),
             ("pheap-redo", "pheap-redo-noprot", 0.97),
             ("pheap-undo", "pmemobj", None), ("pheap-undo", "pheap-redo", None)]


def kv_rows_section(rows):
    """pheap_kvbench's table: one row per variant and thread count, then the ratios."""
    if not rows:
        return ""
    p = rows[0].get("params", {})
    order = {v: i for i, v in enumerate(KV_VARIANTS)}
    rows = sorted(rows, key=lambda r: (r["threads"], order.get(r["variant"], 99)))
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["variant"], r["threads"], "failed: " + r["error"].replace("|", "/"),
                         "", "", "", r.get("flush", "")])
            continue
        ops = (f"{metric(r, 'ops_per_s') / 1e6:.3f} ({metric(r, 'ops_per_s', 'min') / 1e6:.3f}–"
               f"{metric(r, 'ops_per_s', 'max') / 1e6:.3f})")
        body.append([r["variant"], r["threads"], ops, fixed(metric(r, "fences_per_update")),
                     fixed(metric(r, "flushes_per_update")), fixed(metric(r, "tx_fences_per_commit")),
                     r.get("flush", "")])
    text = (f"\n## Transactions: key-value store\n\n`pheap_kvbench`: {p.get('keys')} keys in a "
            f"persistent hash table, {p.get('ops')} operations ({p.get('read_pct')} % reads, the "
            f"rest updates; Zipfian keys, theta {p.get('theta')}), {p.get('value_size')}-byte "
            "version blocks; each update is one transaction that allocates the new version, links "
            "it and frees the old one. Million operations per second, median of the repetitions "
            "(min–max); fences and flushes per update transaction and transactional fences per "
            "commit from `pheap_stats`.\n\n"
            + table(["variant", "threads", "Mops/s", "fences/update", "flushes/update",
                     "tx fences/commit", "flush"], body))
    idx = {(r["variant"], r["threads"]): r for r in rows if "error" not in r}
    threads = sorted({r["threads"] for r in rows})
    ratio_rows = []
    for a, b, target in KV_RATIOS:
        line = [f"{a} ÷ {b}"]
        for t in threads:
            ra, rb = idx.get((a, t)), idx.get((b, t))
            if ra and rb and metric(rb, "ops_per_s"):
                v = metric(ra, "ops_per_s") / metric(rb, "ops_per_s")
                mark = "" if target is None else (" (met)" if v >= target else " (missed)")
                line.append(f"{v:.2f}×{mark}")
            else:
                line.append("—")
        line.append("—" if target is None else f"≥ {target}")
        ratio_rows.append(line)
    text += ("\nRatios of the medians (the goals: pheap-redo at least 1.5× libpmemobj, and within "
             "25 % of the same run without flushes).\n\n"
             + table(["ratio"] + [f"t={t}" for t in threads] + ["goal"], ratio_rows))
    return text


def kv_recovery_section(rows):
    if not rows:
        return ""
    r = rows[-1]
    if "error" in r:
        return "\n### Recovery of interrupted transactions\n\nfailed: " + r["error"] + "\n"
    us = lambda k, f="median": f"{metric(r, k, f) / 1e3:.1f}"
    def faults(k):
        v = metric(r, k.replace("_ns", "_faults"))
        return "—" if v is None else f"{v:.0f}"
    body = [[label, f"{us(k)} ({us(k, 'min')}–{us(k, 'max')})", faults(k)]
            for label, k in (("after a clean close", "clean_open_ns"),
                             ("after a kill, no transaction open", "crash_open_ns"),
                             (f"after a kill, {r['transactions']} transactions open",
                              "tx_open_ns"))]
    work = metric(r, "recovery_ns") / 1e3
    return (f"\n### Recovery of interrupted transactions\n\n`pheap_kvbench --recovery`: "
            f"{r['transactions']} threads each leave a transaction open (an undo snapshot and an "
            "in-place change, an allocation, a redo write) when the process is killed; "
            f"`pheap_open` time in µs, median of {r['reps']} (min–max), flush {r.get('flush')}. "
            "Every transaction was rolled back.\n\n"
            + table(["pheap_open", "µs", "page faults"], body)
            + f"\nRecovery work (open with transactions − open without): **{work:.1f} µs** "
              f"(goal: under 60 µs for 512).\n")


def kv_section(kv):
    return (kv_rows_section([r for r in kv if r.get("bench") == "kv-tx"])
            + kv_recovery_section([r for r in kv if r.get("bench") == "kv-recovery"]))


def cpp_section(rows):
    """pheap_cppbench's figures: the C++ layer against raw pointers, and the
    vector in transactions; one table per heap location."""
    if not rows:
        return ""
    text = ("\n## The C++ layer (pheap_cppbench)\n\n`pheap::ptr` against raw pointers (list walk, "
            "`boost::container::map` lookup) and `vector<int, pheap::allocator<int>>` push_back "
            "in transactions. Median of the repetitions, slowest and fastest in brackets; a ratio "
            "is taken within each repetition (all variants run in turns in one process), then "
            "its median. The ratio goal of the issue: within 5 % (at most 1.05).\n")
    for where in sorted({r.get("heap_dir", "?") for r in rows}):
        body = []
        here = [r for r in rows if r.get("heap_dir", "?") == where]
        for r in here:
            spread = f"{r['min']:.3g}–{r['max']:.3g}" if "min" in r else "—"
            body.append([r["bench"], r["variant"], f"{r['value']:.3g}", spread, r["unit"]])
        text += (f"\nHeaps in {where}, {here[0].get('reps')} repetitions.\n\n"
                 + table(["benchmark", "variant", "median", "min–max", "unit"], body))
    return text


def meta_section(meta):
    if not meta:
        return ""
    return table(["fact", "value"], [[k, str(v).replace("|", "/")] for k, v in meta.items()])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", help="JSON lines written by pheap_bench --json")
    ap.add_argument("--meta", action="append", help="key=value fact about the run")
    ap.add_argument("--json", required=True, help="run JSON to write (with --lines) or read")
    ap.add_argument("--out", required=True, help="directory for report.md and the charts")
    ap.add_argument("--summary", help="also copy report.md here (charts are not copied)")
    ap.add_argument("--backends", help="JSON lines of the back-end table (with a backend field)")
    ap.add_argument("--kv", help="JSON lines of pheap_kvbench (the transactions section)")
    ap.add_argument("--cpp", help="JSON lines of pheap_cppbench (the C++ layer section)")
    args = ap.parse_args()

    run = load_run(args)
    results = run["results"]
    os.makedirs(args.out, exist_ok=True)
    allocs = alloc_order(results)
    idx = index(results)
    title = run["meta"].get("run", os.path.basename(args.json))
    body = [f"# pheap benchmarks: {title}\n\n", meta_section(run["meta"]), "\n",
            throughput_section(results, allocs, idx), protection_section(results, idx),
            latency_section(results, allocs),
            memory_section(results, allocs), recovery_section(results, allocs),
            recovery_gc_section(results, allocs),
            kv_section(run.get("kv", [])),
            cpp_section(run.get("cpp", [])),
            backends_section(run.get("backends", []), run["meta"].get("fs_dir", "?")),
            failure_section(results)]
    text = "".join(body)
    charts = charts_section(args.out, results, allocs)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text + charts)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)
    print(f"report: {os.path.join(args.out, 'report.md')}")


if __name__ == "__main__":
    main()
