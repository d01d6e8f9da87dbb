"""``streams simulate``: route a key distribution (or a file of real keys) offline and report.

The work is :func:`streams.core.simulate.simulate`; this module parses flags and prints.
"""

from __future__ import annotations

import argparse

from streams.cli import HelpFormatter, non_negative_float, positive_int, print_fields, print_json, print_table
from streams.core.errors import StreamsError
from streams.core.routing.placement import HASHES, PLACEMENTS
from streams.core.simulate import DISTRIBUTIONS, SimulationReport, Workload, generate_keys, read_keys, simulate

NAME = "simulate"
_SHOWN_PARTITIONS = 64

_EPILOG = """\
examples:
  streams simulate --distribution zipf --keys 1000 --events 100000 --partitions 12
  streams simulate --distribution tenants --keys 5000 --elephants 2 --elephant-share 0.4 --placement jump --hash xxh3
  streams simulate --keys-file tenants.txt --partitions 24 --json
  streams simulate --keys-file events.csv --csv-column user_id --plot loads.png

Every event gets the ID i (its position), which picks its salt when its key is
split. The whole run counts as one window of --window-s seconds, so a key's rate
is its count / window; a key is hot above max(--hot-share-multiple x fair share,
--hot-min-rate) events/s.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``simulate`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="replay keys through the router offline: balance, hot keys, splits, growth",
        description="Route a key distribution or a file of real keys through the router, without a broker, "
                    "and report partition loads before and after hot-key splitting, and how many keys move "
                    "when the partition count grows by one.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_workload_arguments(parser)
    keys = parser.add_argument_group("real keys (instead of --distribution)")
    keys.add_argument("--keys-file", metavar="FILE", help="one key per line (blank lines skipped), or a CSV file")
    keys.add_argument("--csv-column", metavar="NAME", help="read FILE as CSV with a header and take this column")
    parser.add_argument("--events", type=positive_int, default=100_000, metavar="N",
                        help="events to draw from the distribution (default: 100000; with --keys-file, "
                             "every line is one event)")
    routing = parser.add_argument_group("routing")
    routing.add_argument("--partitions", type=positive_int, default=12, metavar="N", help="partition count (default: 12)")
    routing.add_argument("--placement", choices=PLACEMENTS, default="mod", help="placement (default: mod)")
    routing.add_argument("--hash", choices=HASHES, default="murmur2", help="hash (default: murmur2)")
    hot = parser.add_argument_group("hot-key detection")
    hot.add_argument("--window-s", type=non_negative_float, default=10.0, metavar="S",
                     help="the run counts as one window of S seconds (default: 10)")
    hot.add_argument("--hot-share-multiple", type=non_negative_float, default=2.0, metavar="X",
                     help="hot above X times the fair per-partition rate (default: 2)")
    hot.add_argument("--hot-min-rate", type=non_negative_float, default=100.0, metavar="R",
                     help="and above R events/s (default: 100)")
    parser.add_argument("--plot", metavar="FILE.png", help="draw partition loads before and after splitting "
                                                            "(needs matplotlib: the 'plot' extra)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The key-distribution flags, shared with ``streams produce``."""
    group = parser.add_argument_group("key distribution")
    group.add_argument("--distribution", choices=DISTRIBUTIONS, default="zipf", help="(default: zipf)")
    group.add_argument("--keys", type=positive_int, default=1000, metavar="N", help="distinct keys (default: 1000)")
    group.add_argument("--zipf-exponent", type=float, default=1.1, metavar="S", help="zipf: exponent (default: 1.1)")
    group.add_argument("--elephants", type=positive_int, default=3, metavar="K",
                       help="tenants: how many heavy tenants (default: 3)")
    group.add_argument("--elephant-share", type=float, default=0.3, metavar="F",
                       help="tenants: their share of all events, 0..1 (default: 0.3)")
    group.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def workload_from(args: argparse.Namespace) -> Workload:
    """The Workload the flags name; raises ConfigError for an out-of-range value."""
    return Workload(args.distribution, args.keys, args.zipf_exponent, args.elephants, args.elephant_share, args.seed)


def run(args: argparse.Namespace) -> int:
    """Simulate and print the report (or JSON); raises StreamsError / OSError for bad input."""
    if args.csv_column and not args.keys_file:
        raise StreamsError("--csv-column needs --keys-file")
    if args.plot:
        _require_matplotlib()
    if args.keys_file:
        key_file = read_keys(args.keys_file, args.csv_column)
        keys: list[str] | tuple[str, ...] = key_file.keys
        source = key_file.source + (f" ({key_file.skipped} blank skipped)" if key_file.skipped else "")
    else:
        workload = workload_from(args)
        keys, source = generate_keys(workload, args.events), workload.describe()
    report = simulate(keys, partitions=args.partitions, placement=args.placement, hash=args.hash,
                      window_s=args.window_s, share_multiple=args.hot_share_multiple, min_rate=args.hot_min_rate,
                      source=source)
    if args.plot:
        _plot(report, args.plot)
    if args.json:
        print_json(report.to_record())
    else:
        _print_report(report)
    return 0


def _print_report(r: SimulationReport) -> None:
    enter = "-" if r.policy is None else f"{r.policy.thresholds(r.events / r.window_s)[0]:,.1f} events/s"
    print_fields("simulation", [
        ("keys", r.source),
        ("events", r.events),
        ("distinct keys", r.distinct_keys),
        ("routing", f"{r.partitions} partitions, {r.placement} + {r.hash}"),
        ("window", f"{r.window_s:g} s ({r.events / r.window_s:,.1f} events/s in all)"),
        ("hot above", enter),
    ])
    shown = min(r.partitions, _SHOWN_PARTITIONS)
    rows = [(p, r.unsplit.counts[p], r.split.counts[p]) for p in range(shown)]
    note = f"... {r.partitions - shown} more partitions in --json" if shown < r.partitions else ""
    print_table("events per partition", ["partition", "unsplit", "split"], rows, note=note)
    print_table("balance", ["", "max", "mean", "min", "max/mean"], [
        ("unsplit", r.unsplit.max, r.unsplit.mean, r.unsplit.min, r.unsplit.max_over_mean),
        ("split", r.split.max, r.split.mean, r.split.min, r.split.max_over_mean),
    ])
    if r.hot_keys:
        print_table("hot keys", ["key", "events", "rate/s", "share", "split factor"],
                    [(h.key, h.count, h.rate, f"{h.share:.1%}", h.split_factor) for h in r.hot_keys])
    else:
        print("hot keys: none" + (" (one partition: nothing to split across)" if r.policy is None else "") + "\n")
    g = r.growth
    print_table(f"growth {g.from_partitions} -> {g.to_partitions} partitions ({g.hash})",
                ["placement", "keys moved", "of keys", "fraction", "events moved"], [
                    ("mod", g.mod.moved_keys, g.mod.distinct_keys, f"{g.mod.fraction:.1%}", f"{g.mod.event_fraction:.1%}"),
                    ("jump", g.jump.moved_keys, g.jump.distinct_keys, f"{g.jump.fraction:.1%}",
                     f"{g.jump.event_fraction:.1%}"),
                ], note=f"ideal: 1/(N+1) = {g.ideal_fraction:.1%}")


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise StreamsError("--plot needs matplotlib: pip install 'streams-partitioner[plot]'") from None


def _plot(r: SimulationReport, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitions = range(r.partitions)
    fig, ax = plt.subplots(figsize=(max(6.0, r.partitions * 0.35), 4.0))
    width = 0.4
    ax.bar([p - width / 2 for p in partitions], r.unsplit.counts, width,
           label=f"unsplit (max/mean {r.unsplit.max_over_mean:.2f})")
    ax.bar([p + width / 2 for p in partitions], r.split.counts, width,
           label=f"split (max/mean {r.split.max_over_mean:.2f})")
    ax.axhline(r.unsplit.mean, color="grey", linestyle="--", linewidth=1, label="mean")
    ax.set_xlabel("partition")
    ax.set_ylabel("events")
    ax.set_title(f"{r.source}: {r.partitions} partitions, {r.placement} + {r.hash}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
