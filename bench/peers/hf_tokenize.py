"""Peer of bench/tokenizer_bench.cpp: HF tokenizers encoding the same corpus (the JSON file that
`tokenizer_bench --write-corpus=FILE` writes: {kind: [strings]}), with add_special_tokens=False, one string at a time
on one thread (`encode`), and the whole list at once (`encode_batch`, on tokenizers' own thread pool). Checks that
its ids equal the ones tokenizer_bench wrote (--check-ids, from its --write-ids=FILE), and prints MB/s (10^6 bytes of
UTF-8 input per second) in the table format of tokenizer_bench:

    build/bench/tokenizer_bench --tokenizer=third_party/tokenizer/tokenizer.json \
        --write-corpus=/tmp/corpus.json --write-ids=/tmp/afd_ids.json
    python3 bench/peers/hf_tokenize.py --tokenizer third_party/tokenizer/tokenizer.json --corpus /tmp/corpus.json \
        --check-ids /tmp/afd_ids.json
"""

import argparse
import json
import os
import time

import tokenizers


def best_rate(fn, total_bytes, min_seconds, repeats):
    """The best MB/s of `repeats` series, each running fn() for at least min_seconds."""
    best = 0.0
    for _ in range(repeats):
        runs = 0
        start = time.perf_counter()
        while True:
            fn()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        best = max(best, runs * total_bytes / elapsed / 1e6)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", required=True, help="tokenizer.json")
    p.add_argument("--corpus", required=True, help="the corpus tokenizer_bench --write-corpus wrote")
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check-ids", help="ids of every string from tokenizer_bench --write-ids ({kind: [[ids]]})")
    args = p.parse_args()

    tok = tokenizers.Tokenizer.from_file(args.tokenizer)
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)

    rows = []
    ids_out = {}
    for kind in sorted(corpus):
        strings = corpus[kind]
        total = sum(len(s.encode("utf-8")) for s in strings)
        ids_out[kind] = [tok.encode(s, add_special_tokens=False).ids for s in strings]

        def one_by_one():
            for s in strings:
                tok.encode(s, add_special_tokens=False)

        def batch():
            tok.encode_batch(strings, add_special_tokens=False)

        rows.append((f"encode/{kind}", best_rate(one_by_one, total, args.min_seconds, args.repeats)))
        rows.append((f"encode_batch/{kind}", best_rate(batch, total, args.min_seconds, args.repeats)))

    if args.check_ids:
        with open(args.check_ids, encoding="utf-8") as f:
            theirs = json.load(f)
        mismatches = sum(1 for kind in corpus for a, b in zip(ids_out[kind], theirs.get(kind, [])) if a != b)
        mismatches += sum(abs(len(ids_out[kind]) - len(theirs.get(kind, []))) for kind in corpus)
        strings = sum(len(v) for v in corpus.values())
        print(f"ids: {strings - mismatches} of {strings} strings equal to {args.check_ids}")

    threads = os.environ.get("RAYON_NUM_THREADS", str(os.cpu_count()))
    print(f"HF tokenizers {tokenizers.__version__}; encode_batch on {threads} threads")
    print(f"{'hf tokenizers':<44} {'MB/s':>10}")
    for name, rate in rows:
        print(f"{name:<44} {rate:>10.2f}")


if __name__ == "__main__":
    main()
