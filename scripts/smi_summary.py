#!/usr/bin/env python3
"""One line of SM clock, board power and throttle reasons from an nvidia-smi sample file.

The file holds rows of `nvidia-smi --format=csv,noheader,nounits --query-gpu=` with the fields
timestamp, clocks.sm, clocks.mem, power.draw, clocks_event_reasons.sw_power_cap,
clocks_event_reasons.hw_slowdown, clocks_event_reasons.sw_thermal_slowdown, temperature.gpu
(scripts/gpu_check.sh, phase "power"). Only samples drawing more than --busy-watts count, so the idle
moments before and after the timed work do not dilute the figures.

    smi_summary.py LABEL FILE [--busy-watts W]
"""
import argparse
import sys


def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("label")
    parser.add_argument("file")
    parser.add_argument("--busy-watts", type=float, default=250.0)
    args = parser.parse_args()

    rows = []
    with open(args.file) as f:
        for line in f:
            fields = [x.strip() for x in line.split(",")]
            if len(fields) < 8:
                continue
            try:
                clock, watts = float(fields[1]), float(fields[3])
            except ValueError:
                continue  # a header, a "[N/A]" or an error line
            if watts > args.busy_watts:
                rows.append((clock, watts, fields[4], fields[5], fields[6], fields[7]))
    if not rows:
        print(f"{args.label:24s} no samples above {args.busy_watts:.0f} W in {args.file}")
        return 1
    clocks = sorted(r[0] for r in rows)
    watts = sorted(r[1] for r in rows)

    def active(i):
        return 100.0 * sum(r[i] == "Active" for r in rows) / len(rows)

    print(f"{args.label:24s} samples {len(rows):4d}  SM MHz p10 {quantile(clocks, 0.1):5.0f} median "
          f"{quantile(clocks, 0.5):5.0f} p90 {quantile(clocks, 0.9):5.0f}  power W median {quantile(watts, 0.5):4.0f} "
          f"p90 {quantile(watts, 0.9):4.0f}  power cap {active(2):3.0f} %  hw slowdown {active(3):3.0f} %  "
          f"thermal {active(4):3.0f} %  {rows[-1][5]} C")
    return 0


if __name__ == "__main__":
    sys.exit(main())
