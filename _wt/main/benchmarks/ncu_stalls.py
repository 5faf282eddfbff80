"""Where a kernel's warps wait, from an Nsight Compute source page (developer tool): the
stall reasons summed over the kernel, then the SASS instructions with the most samples and
their leading reasons.

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > source.csv
    python3 benchmarks/ncu_stalls.py source.csv [--top 40]

(benchmarks/ncu_attention_target.py says how to make the report.) Samples of warps that only
wait for the kernel to end (a producer partition's idle warps) count here too: read the top
instructions, not the totals alone.
"""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source_csv")
    ap.add_argument("--top", type=int, default=40)
    opts = ap.parse_args()
    with open(opts.source_csv, newline="") as f:
        rows = list(csv.reader(f))
    header = next(r for r in rows if "Address" in r and "Source" in r)
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    totals, records = collections.Counter(), []
    for r in rows[rows.index(header) + 1:]:
        if len(r) < len(header):
            continue
        samples = int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        by_reason = {name[len("stall_"):]: int(r[col[name]] or 0) for name in reasons}
        totals.update(by_reason)
        records.append((samples, r[col["Address"]], r[col["Source"]].strip(), by_reason))
    total = sum(s for s, *_ in records) or 1
    print(f"{total} samples; by reason:")
    for name, n in totals.most_common(12):
        print(f"  {name:20s} {n:9d} {100 * n / total:5.1f}%")
    print(f"top {opts.top} instructions (share of samples, address, SASS, leading reasons):")
    for samples, address, source, by_reason in sorted(records, key=lambda rec: -rec[0])[:opts.top]:
        lead = ", ".join(f"{k} {v}" for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1])[:3] if v)
        print(f"{100 * samples / total:5.1f}% {address[-5:]} {source[:64]:64s} | {lead}")


if __name__ == "__main__":
    main()
