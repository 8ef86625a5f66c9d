"""Joins the CSV of `afd bench moe` with the peers' CSVs and prints the summary table (last in the GPU check).
Usage: report.py OURS.csv [PEER.csv ...]"""

import csv
import sys

TARGETS = {1: 60, 8: 60, 64: 85, 256: 85, 1024: 85, 4096: 55, 16384: 55}


def read(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError as e:
        print(f"report: {path}: {e}", file=sys.stderr)
        return []


def main():
    ours = read(sys.argv[1])
    if not ours:
        print("report: no rows from afd bench moe")
        return 1
    peers = {}
    for path in sys.argv[2:]:
        for r in read(path):
            peers[(r["peer"], int(r["tokens"]), r["routing"])] = float(r["median_us"])
    names = sorted({p for p, _, _ in peers})

    sweep = {}
    for r in ours:
        key = (int(r["tokens"]), r["routing"])
        t = float(r["median_us"])
        if key not in sweep or t < sweep[key][0]:
            sweep[key] = (t, r["tile"])

    first = ours[0]
    print(f"\nMoE layer E=128 K=8 H=2048 I=768 on {first['device']}: copy {float(first['copy_tbps']):.2f} TB/s, "
          f"bf16 GEMM {float(first['gemm_tflops']):.0f} TFLOP/s; graph replay, 5 weight sets rotated")
    head = f"{'T':>6} {'routing':>8} {'exp':>4} {'floor_us':>9} {'ours_us':>9} {'%floor':>7} {'TFLOP/s':>8}"
    for n in names:
        head += f" {n + '_us':>14} {'%fl':>5}"
    head += f" {'best_tile':>15} {'target':>6} {'met':>4}"
    print(head)
    met_all = True
    for r in ours:
        if not r["tile"].startswith("auto"):
            continue
        t = int(r["tokens"])
        ours_us = float(r["median_us"])
        floor = float(r["floor_us"])
        line = (f"{t:>6} {r['routing']:>8} {r['distinct_experts']:>4} {floor:>9.1f} {ours_us:>9.1f} "
                f"{float(r['pct_of_floor']):>7.1f} {float(r['tflops']):>8.1f}")
        faster = True
        for n in names:
            p = peers.get((n, t, r["routing"]), float("nan"))
            line += f" {p:>14.1f} {100 * floor / p if p == p and p > 0 else float('nan'):>5.0f}"
            faster = faster and (p != p or ours_us < p)
        target = TARGETS.get(t, 0)
        met = faster and float(r["pct_of_floor"]) >= target
        met_all = met_all and met
        best_t, best_tile = sweep[(t, r["routing"])]
        line += f" {best_tile + ':' + format(best_t, '.0f'):>15} {target:>6} {'yes' if met else 'NO':>4}"
        print(line)
    print("all targets met" if met_all else "some targets missed (see docs/performance.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
