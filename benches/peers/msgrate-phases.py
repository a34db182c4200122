#!/usr/bin/env python3
"""Per-message time breakdown of the windowed bandwidth test (msgrate-profile.sh).

usage: msgrate-phases.py DIR SIZE

DIR holds runs.tsv and, per configuration and rank, perf's symbol list
(<config>.<rank>.txt: "percent  command  object  [.] symbol" lines of
`perf report --no-children --sort symbol`). The time per message is SIZE bytes
divided by the median bandwidth of the unprofiled repeats; each rank's samples,
grouped into phases by the first pattern that matches the symbol, split it.
Rank 0 sends, rank 1 receives. Prints a Markdown table.
"""

import re
import statistics
import sys
from pathlib import Path

# (phase, regular expressions over symbol names), first match wins. The
# rankwire names are its functions; the Open MPI names are ob1/vader/opal's.
PHASES = [
    ("wait for the ack / the peer (idle)",
     [r"recv_direct", r"\[k\]", r"sched", r"yield"]),
    ("post receive (irecv: lock, request, matching)",
     [r"irecv", r"post_recv", r"set_recv", r"for_comm", r"Matcher.*post", r"matching::",
      r"mca_pml_ob1_irecv", r"recv_req", r"recv_request_start", r"append_recv",
      r"ompi_request_construct", r"opal_free_list"]),
    ("send (isend: lock, frame, transport write)",
     [r"isend", r"start_send", r"post_send", r"ShmTransport.*send", r"ring.*push",
      r"encode", r"mca_pml_ob1_isend", r"mca_pml_ob1_send", r"sendi", r"send_request",
      r"mca_btl_vader_send", r"mca_btl_vader_alloc", r"mca_btl_vader_prepare"]),
    ("arrival: match and deliver into the buffer",
     [r"on_frame", r"arrive", r"deliver", r"Reqs::complete", r"write_payload", r"copy_to",
      r"memmove", r"memcpy", r"recv_frag", r"match", r"mca_pml_ob1_recv_request_progress",
      r"recv_request_complete", r"ompi_request_complete"]),
    ("progress: poll the transports",
     [r"progress", r"next_frame", r"consume_frame", r"poll", r"arrival_hint",
      r"push_output", r"vader_component", r"vader_poll", r"opal_progress"]),
    ("complete: wait / waitall, statuses, free",
     [r"wait", r"take_done", r"drop_in_place", r"from_iter", r"collect", r"Request",
      r"ompi_request", r"request_free", r"free", r"malloc", r"cfree"]),
    ("benchmark loop", [r"bandwidth", r"run_bw", r"main"]),
]


def load(path):
    """(percent, dso, symbol) rows of `perf report --sort dso,symbol`."""
    rows = []
    for line in Path(path).read_text().splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*?)(\s+-\s+-)?\s*$", line)
        if m:
            dso, sym = m.group(2), m.group(4)
            if m.group(3) == "k":
                sym = "[k] " + sym
            elif re.fullmatch(r"0x[0-9a-f]+", sym):
                # a stripped static function: name it by its library
                sym = f"{sym} in {dso}"
            rows.append((float(m.group(1)), dso, sym))
    return rows


def phase_of(sym):
    for name, pats in PHASES:
        if any(re.search(p, sym) for p in pats):
            return name
    return "other"


# Instructions per call (callgrind): (row, rankwire function, Open MPI function,
# calls per message: 1 for isend/irecv, 1/64 for the waitall of a 64-message window).
CALLS = [
    ("isend (rank 0)", 0, "rankwire::comm::Communicator::start_send", "PMPI_Isend"),
    ("wait_all / MPI_Waitall of the sends, per message (rank 0)", 0,
     "rankwire::request::wait_all", "PMPI_Waitall"),
    ("irecv (rank 1)", 1, "rankwire::comm::Communicator::post_recv", "PMPI_Irecv"),
    ("wait_all / MPI_Waitall of the receives, per message (rank 1)", 1,
     "rankwire::request::wait_all", "PMPI_Waitall"),
]


def call_costs(path):
    """{function: (inclusive instructions, calls)} from `callgrind_annotate
    --inclusive=yes --tree=caller`: each block lists the callers (`<` lines, with
    call counts) and then the function (`*` line, its inclusive count)."""
    out, calls = {}, 0
    for line in Path(path).read_text(errors="replace").splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([ \d.]+%\)\s+([<*])\s+(.*)$", line)
        if not m:
            calls = 0
            continue
        ir, kind, rest = int(m.group(1).replace(",", "")), m.group(2), m.group(3)
        if kind == "<":
            c = re.search(r"\((\d[\d,]*)x\)", rest)
            calls += int(c.group(1).replace(",", "")) if c else 0
            continue
        name = re.sub(r"\s*\[.*\]\s*$", "", rest).split(":", 1)[-1].strip()
        prev = out.get(name, (0, 0))
        out[name] = (prev[0] + ir, prev[1] + calls)
        calls = 0
    return out


def instructions_table(d, cfgs):
    costs = {}
    for c in cfgs:
        for r in (0, 1):
            f = d / f"{c}.{r}.calls.txt"
            if f.exists():
                costs[(c, r)] = call_costs(f)
    if not costs:
        return []
    out = ["\n## Instructions per call (callgrind, 200 windows of 64 messages)\n",
           "| call | " + " | ".join(cfgs) + " |", "|---|" + "---|" * len(cfgs)]
    totals = {c: 0.0 for c in cfgs}
    for row, rank, rw_fn, ompi_fn in CALLS:
        cells = []
        for c in cfgs:
            fn = rw_fn if c == "rankwire" else ompi_fn
            ir, n = costs.get((c, rank), {}).get(fn, (0, 0))
            if not n:
                cells.append("n/a")
                continue
            per = ir / n
            if "per message" in row:
                per /= 64
            totals[c] += per
            cells.append(f"{per:.0f}")
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    out.append("| **both sides, per message** | " + " | ".join(
        f"{totals[c]:.0f}" for c in cfgs) + " |")
    return out


def main():
    d, size = Path(sys.argv[1]), int(sys.argv[2])
    bws = {}
    for line in (d / "runs.tsv").read_text().splitlines()[1:]:
        cfg, rep, bw = (line.split("\t") + ["", "", ""])[:3]
        if rep != "profiled" and bw:
            bws.setdefault(cfg, []).append(float(bw))
    cfgs = [c for c in ("rankwire", "ompi-shm") if (d / f"{c}.0.txt").exists()]
    ns = {c: size / statistics.median(bws[c]) * 1e3 for c in cfgs if bws.get(c)}
    out = [f"# Windowed bandwidth, {size} B messages: time per message by phase\n",
           "ns per message = share of the rank's samples x (size / median bandwidth of "
           "the unprofiled repeats); rank 0 sends, rank 1 receives.\n"]
    out.append("| " + " | ".join(["phase"] + [f"{c} r{r}" for c in cfgs for r in (0, 1)]) + " |")
    out.append("|" + "---|" * (1 + 2 * len(cfgs)))
    table = {}
    for c in cfgs:
        for r in (0, 1):
            acc = {}
            for pct, _dso, sym in load(d / f"{c}.{r}.txt"):
                key = phase_of(sym)
                acc[key] = acc.get(key, 0.0) + pct
            table[(c, r)] = acc
    for name in [p for p, _ in PHASES] + ["other"]:
        cells = []
        for c in cfgs:
            for r in (0, 1):
                pct = table[(c, r)].get(name, 0.0)
                cells.append(f"{pct * ns.get(c, 0) / 100:.0f} ({pct:.0f} %)")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("| **total** | " + " | ".join(
        f"{ns.get(c, 0):.0f}" for c in cfgs for _ in (0, 1)) + " |")
    out.append("")
    for c in cfgs:
        out.append(f"- {c}: median {statistics.median(bws[c]):.1f} MB/s over "
                   f"{len(bws[c])} repeats ({', '.join(f'{b:.1f}' for b in bws[c])})")
    out.extend(instructions_table(d, cfgs))
    out.append("\nTop symbols per rank (self time):\n")
    for c in cfgs:
        for r in (0, 1):
            top = load(d / f"{c}.{r}.txt")[:8]
            out.append(f"- {c} rank {r}: " + "; ".join(
                f"`{sym[:70]}` {pct:.1f} %" for pct, _dso, sym in top))
    print("\n".join(out))


if __name__ == "__main__":
    main()
