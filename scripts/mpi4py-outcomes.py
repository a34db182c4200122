#!/usr/bin/env python3
"""Per-test outcomes of one mpi4py test-suite run (scripts/mpi4py.sh).

    mpi4py-outcomes.py parse LOGDIR OUT.tsv   -> prints a one-line count summary
    mpi4py-outcomes.py diff REF.tsv OURS.tsv  -> prints tests ok in REF, not ok in OURS

LOGDIR holds one file per rank (`rank<R>.log`), each the output of
`python test/main.py -v` on that rank (unittest's verbose lines
`test_x (module.Class.test_x) ... ok|FAIL|ERROR|skipped '...'|expected failure|
unexpected success`, the outcome possibly a few lines later when the test printed
something). A test's outcome is the worst over ranks (error > fail > unexpected success >
ok > expected failure > skip); a test that a rank started but never finished (the run
timed out or crashed in it) is `unfinished` (counted as an error). OUT.tsv gets one
`test-id<TAB>outcome` line per test, sorted.
"""

import pathlib
import re
import sys

START = re.compile(r"^(test\w*) \(([\w.]+)\)(.*)$")
OUTCOMES = [
    ("ok", "ok"),
    ("FAIL", "fail"),
    ("ERROR", "error"),
    ("expected failure", "xfail"),
    ("unexpected success", "xpass"),
    ("skipped", "skip"),
]
RANK = {"skip": 0, "xfail": 1, "ok": 2, "xpass": 3, "fail": 4, "error": 5, "unfinished": 6}


def outcome_of(text):
    """The outcome named at the start of `text`, or None."""
    text = text.strip()
    for word, name in OUTCOMES:
        if text == word or text.startswith(word + " ") or (
            name == "skip" and text.startswith("skipped")
        ):
            return name
    return None


def parse_rank(text):
    """test id -> outcome for one rank's verbose output."""
    results = {}
    pending = None  # test id whose outcome has not been seen yet
    for line in text.splitlines():
        m = START.match(line)
        if m:
            if pending is not None:
                results.setdefault(pending, "unfinished")
            tid = m.group(2)
            if not tid.endswith("." + m.group(1)):
                tid = f"{tid}.{m.group(1)}"
            rest = m.group(3)
            if " ... " in rest:
                out = outcome_of(rest.split(" ... ", 1)[1])
                if out is not None:
                    results[tid] = out
                    pending = None
                    continue
            pending = tid
            continue
        if pending is not None:
            tail = line.split(" ... ", 1)[1] if " ... " in line else line
            out = outcome_of(tail)
            if out is not None:
                results[pending] = out
                pending = None
    if pending is not None:
        results.setdefault(pending, "unfinished")
    return results


def parse(logdir, out_tsv):
    merged = {}
    for f in sorted(pathlib.Path(logdir).glob("rank*.log")):
        for tid, out in parse_rank(f.read_text(errors="replace")).items():
            if tid not in merged or RANK[out] > RANK[merged[tid]]:
                merged[tid] = out
    with open(out_tsv, "w", encoding="utf-8") as fh:
        for tid in sorted(merged):
            fh.write(f"{tid}\t{merged[tid]}\n")
    counts = {k: 0 for k in RANK}
    for out in merged.values():
        counts[out] += 1
    print(
        f"tests {len(merged)}: ok {counts['ok']}, fail {counts['fail']}, "
        f"error {counts['error']}, skip {counts['skip']}, "
        f"xfail {counts['xfail']}, xpass {counts['xpass']}, "
        f"unfinished {counts['unfinished']}"
    )


def load(tsv):
    res = {}
    p = pathlib.Path(tsv)
    if p.exists():
        for line in p.read_text().splitlines():
            tid, _, out = line.partition("\t")
            res[tid] = out
    return res


def diff(ref_tsv, ours_tsv):
    ref, ours = load(ref_tsv), load(ours_tsv)
    for tid in sorted(ref):
        if ref[tid] == "ok" and ours.get(tid) != "ok":
            print(f"{tid}\t{ours.get(tid, 'not run')}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "parse":
        parse(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        self_test()
    else:
        sys.exit(__doc__)


def self_test():
    text = "\n".join(
        [
            "test_a (test_x.TestA.test_a) ... ok",
            "test_b (test_x.TestA.test_b) ... printed",
            "something",
            "FAIL",
            "test_c (test_x.TestA.test_c) ... skipped 'no MPI_Win'",
            "test_d (test_x.TestA.test_d)",
            "Docstring of d ... ERROR",
            "test_e (test_x.TestA.test_e) ... expected failure",
            "test_f (test_x.TestA.test_f) ... ",
        ]
    )
    got = parse_rank(text)
    want = {
        "test_x.TestA.test_a": "ok",
        "test_x.TestA.test_b": "fail",
        "test_x.TestA.test_c": "skip",
        "test_x.TestA.test_d": "error",
        "test_x.TestA.test_e": "xfail",
        "test_x.TestA.test_f": "unfinished",
    }
    assert got == want, got
    print("mpi4py-outcomes.py: self-test ok, 6 checks")


if __name__ == "__main__":
    main()
