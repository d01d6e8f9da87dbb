"""``streams simulate``: run the fleet's balancing offline, or route one window of keys, and report.

By default the work is :func:`streams.core.fleet.simulate_fleet`: the fleet's own
pipeline (per-worker sketches, sized summaries, merge, the worker's decider loop)
window after window. ``--single-window`` (implied by ``--events``, ``--keys-file`` and
``--plot``) is :func:`streams.core.simulate.simulate`: one window of exact counts,
decider rounds until it is done, and key movement on growth. This module parses
flags and prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from streams.cli import (
    HelpFormatter,
    non_negative_float,
    positive_int,
    print_fields,
    print_json,
    print_table,
)
from streams.core.config import WorkerSettings
from streams.core.errors import ConfigError, StreamsError
from streams.core.fleet import FleetReport, simulate_fleet
from streams.core.hotkeys.decider import BalancePolicy
from streams.core.routing.placement import HASHES, PLACEMENTS
from streams.core.simulate import (
    DISTRIBUTIONS,
    SimulationReport,
    Workload,
    generate_keys,
    read_keys,
    simulate,
)

NAME = "simulate"
_SHOWN_PARTITIONS = 64
_WORKER = WorkerSettings()  # the worker's defaults: the fleet mode paces itself like the worker

_EPILOG = """\
examples:
  streams simulate --partitions 12 --rate 800
  streams simulate --keys 1000000 --partitions 1000 --workers 50 --rate 1000000 --windows 9
  streams simulate --keys 10000 --partitions 48 --workers 4 --rate 20000 --rotate-s 120 --windows 60
  streams simulate --distribution zipf --keys 1000 --events 100000 --partitions 12
  streams simulate --keys-file tenants.txt --partitions 24 --json
  streams simulate --keys-file events.csv --csv-column user_id --plot loads.png

By default the fleet runs as it does live: --rate events/s drawn from the
distribution (Poisson counts), partition p read by worker p % --workers, each
worker's sliding sketch and the summary it publishes, the worker's decider loop
merging them, its directory changes routing the next events; per window it
prints the measured max/mean (what the decider saw), the true one (the key
weights under the directory in force, free of counting noise) and the changes.
--exact hands the decider the exact counts of each window instead of summaries.

--single-window (implied by --events, --keys-file and --plot) routes a fixed set
of keys instead: every event gets the ID i (its position), which picks its salt
when its key is split; the whole run counts as one window of --window-s seconds;
the decider runs round after round on those exact counts until it has nothing
more to do; and the report adds key movement when the partition count grows.

The decider is the worker's own (the same code and the same defaults as the
worker settings balance_*): it acts when a partition's load is above
--balance-target x mean by more than its counting noise explains, and moves or
splits the fewest heavy keys that bring such partitions under --balance-aim x mean.
"""

#: BalancePolicy field -> the flag that sets it (and its worker setting, in the help).
_POLICY_FLAGS = {
    "balance_target": "--balance-target", "balance_aim": "--balance-aim", "min_rate": "--balance-min-rate",
    "max_keys": "--balance-max-keys", "max_changes": "--balance-max-changes", "hold_s": "--balance-hold-s",
    "confidence": "--balance-confidence", "evidence_windows": "--balance-evidence-windows",
    "propagation_s": "--balance-propagation-s",
    "allow_moves": "--splits-only", "enabled": "--no-balance",
}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``simulate`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="replay keys through the router offline: balance, the directory the decider builds, growth",
        description="Route a key distribution or a file of real keys through the router, without a broker, "
                    "run the worker's load-aware decider on the exact counts, and report partition loads "
                    "before and after, the keys it moved or split, and how many keys move when the "
                    "partition count grows by one.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_workload_arguments(parser)
    keys = parser.add_argument_group("real keys (instead of --distribution)")
    keys.add_argument("--keys-file", metavar="FILE", help="one key per line (blank lines skipped), or a CSV file")
    keys.add_argument("--csv-column", metavar="NAME", help="read FILE as CSV with a header and take this column")
    parser.add_argument("--events", type=positive_int, metavar="N",
                        help="single window: events to draw from the distribution (default: 100000; with "
                             "--keys-file, every line is one event)")
    fleet = parser.add_argument_group("the fleet (the default mode)")
    fleet.add_argument("--workers", type=positive_int, default=1, metavar="N",
                       help="worker instances, partition p read by worker p %% N (default: 1)")
    fleet.add_argument("--windows", type=positive_int, default=9, metavar="N", help="windows to run (default: 9)")
    fleet.add_argument("--rate", type=float, default=800.0, metavar="R", help="events/s in all (default: 800)")
    fleet.add_argument("--rotate-s", type=float, metavar="S",
                       help="the hot set rotates every S seconds: other keys take the heavy ranks")
    fleet.add_argument("--ramp-s", type=float, metavar="S",
                       help="a new key grows from nothing to half the traffic over S seconds (a slow ramp)")
    fleet.add_argument("--lag-s", type=non_negative_float, default=1.0, metavar="S",
                       help="seconds from a decision until producers route by it, in whole ticks of a fifth of "
                            "--window-s (default: 1, the tick after a decision is routed the old way)")
    fleet.add_argument("--stall", type=non_negative_float, default=0.0, metavar="P",
                       help="chance per worker and tick (0..1) that a starved worker reads only half its partitions, "
                            "the rest with their backlog a tick later (default: 0)")
    fleet.add_argument("--exact", action="store_true",
                       help="the decider reads each window's exact counts instead of the workers' summaries")
    fleet.add_argument("--seed-traffic", type=int, default=0, metavar="N",
                       help="seed of the Poisson draws of the traffic (default: 0)")
    parser.add_argument("--single-window", action="store_true",
                        help="route one window of --events keys (or --keys-file) with exact counts, and report "
                             "growth movement")
    routing = parser.add_argument_group("routing")
    routing.add_argument("--partitions", type=positive_int, default=12, metavar="N", help="partition count (default: 12)")
    routing.add_argument("--placement", choices=PLACEMENTS, default="mod", help="placement (default: mod)")
    routing.add_argument("--hash", choices=HASHES, default="murmur2", help="hash (default: murmur2)")
    balance = parser.add_argument_group("the decider (the worker settings balance_*; defaults are theirs)")
    balance.add_argument("--window-s", type=non_negative_float, default=_WORKER.hot_window_s, metavar="S",
                         help="the sketch window, as the worker setting hot_window_s; in --single-window the "
                              f"run counts as one window of S seconds (default: {_WORKER.hot_window_s:g})")
    defaults = BalancePolicy(partitions=1)
    balance.add_argument("--balance-target", type=float, metavar="X",
                         help=f"act when max/mean of partition loads is above X (default: {defaults.balance_target:g})")
    balance.add_argument("--balance-aim", type=float, metavar="X",
                         help=f"plans aim at max/mean X, at most the target (default: {defaults.balance_aim:g})")
    balance.add_argument("--balance-min-rate", type=non_negative_float, metavar="R",
                         help=f"never place keys under R events/s (default: {defaults.min_rate:g})")
    balance.add_argument("--balance-max-keys", type=positive_int, metavar="N",
                         help=f"heaviest keys considered per round (default: {defaults.max_keys})")
    balance.add_argument("--balance-max-changes", type=positive_int, metavar="N",
                         help=f"keys whose placement may change per round (default: {defaults.max_changes})")
    balance.add_argument("--balance-hold-s", type=non_negative_float, metavar="S",
                         help=f"a placement stays at least S seconds before it is retired (default: {defaults.hold_s:g})")
    balance.add_argument("--balance-confidence", type=float, metavar="P",
                         help="the chance that a stream truly at the target triggers nothing in a window "
                              f"(default: {defaults.confidence:g})")
    balance.add_argument("--balance-evidence-windows", type=positive_int, metavar="N",
                         help="unchanged windows of partition counts the trigger adds up, so a small "
                              f"imbalance shows (default: {defaults.evidence_windows})")
    balance.add_argument("--balance-propagation-s", type=non_negative_float, metavar="S",
                         help="after a change, trust no window that begins within S seconds: traffic on its "
                              f"way is still routed the old way (default: {defaults.propagation_s:g})")
    balance.add_argument("--splits-only", action="store_true",
                         help="never move a key whole: keep Kafka's placement for every key that is not split")
    balance.add_argument("--no-balance", action="store_true", help="turn the decider off (plain hash placement)")
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


def policy_from(args: argparse.Namespace, partitions: int) -> BalancePolicy:
    """The BalancePolicy the flags name (defaults for the rest).

    Raises ConfigError naming the flags: for an inconsistent pair, which one the
    user gave and which one is the default (``--balance-aim 1.2`` above the default
    ``--balance-target 1.1``).
    """
    given = {field: getattr(args, flag[2:].replace("-", "_")) for field, flag in _POLICY_FLAGS.items()
             if field not in ("allow_moves", "enabled")}
    given = {field: value for field, value in given.items() if value is not None}
    if args.splits_only:
        given["allow_moves"] = False
    if args.no_balance:
        given["enabled"] = False
    try:
        return BalancePolicy(partitions=partitions, settle_s=args.window_s, **given)
    except ConfigError as exc:
        text = str(exc)
        for field, flag in sorted(_POLICY_FLAGS.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(field, flag)
        defaulted = [flag for field, flag in _POLICY_FLAGS.items() if field not in given and flag in text
                     and field not in ("allow_moves", "enabled")]
        note = f" ({', '.join(defaulted)} at the default)" if defaulted else ""
        raise ConfigError(f"{text}{note}") from None


def run(args: argparse.Namespace) -> int:
    """Simulate and print the report (or JSON); raises StreamsError / OSError for bad input."""
    if args.csv_column and not args.keys_file:
        raise StreamsError("--csv-column needs --keys-file")
    if args.plot:
        _require_matplotlib()
    if not (args.single_window or args.events or args.keys_file or args.plot):
        return _run_fleet(args)
    if args.keys_file:
        key_file = read_keys(args.keys_file, args.csv_column)
        keys: list[str] | tuple[str, ...] = key_file.keys
        source = key_file.source + (f" ({key_file.skipped} blank skipped)" if key_file.skipped else "")
    else:
        workload = workload_from(args)
        keys, source = generate_keys(workload, args.events or 100_000), workload.describe()
    policy = policy_from(args, args.partitions)
    report = simulate(keys, partitions=args.partitions, placement=args.placement, hash=args.hash,
                      window_s=args.window_s, policy=policy, source=source)
    written = _plot(report, args.plot) if args.plot else None
    if args.json:
        print_json(report.to_record())
    else:
        _print_report(report)
    if written is not None:  # stdout stays JSON with --json
        print(f"plot written to {written}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _run_fleet(args: argparse.Namespace) -> int:
    """The default mode: the fleet's pipeline window after window (see the module docstring)."""
    if args.window_s <= 0:
        raise ConfigError("--window-s must be > 0")
    report = simulate_fleet(workload_from(args), partitions=args.partitions, workers=args.workers,
                            windows=args.windows, rate=args.rate, window_s=args.window_s,
                            policy=policy_from(args, args.partitions), placement=args.placement, hash=args.hash,
                            capacity=_WORKER.sketch_capacity, min_window_events=_WORKER.hot_min_window_events,
                            rotate_s=args.rotate_s, ramp_s=args.ramp_s, exact=args.exact, seed=args.seed_traffic,
                            lag_s=args.lag_s, stall=args.stall)
    if args.json:
        print_json(report.to_record())
    else:
        _print_fleet(report)
    return 0


def _print_fleet(r: FleetReport) -> None:
    policy = r.policy
    print_fields("fleet simulation", [
        ("keys", f"{r.source} ({r.distinct_keys:,} occurred)"),
        ("fleet", f"{r.partitions} partitions, {r.workers} worker(s), {r.rate:,.0f} events/s, "
                  f"windows of {r.window_s:g} s, decisions reach producers {r.lag_s:g} s later"
                  + (f", a worker starved in {100 * r.stall:g}% of ticks" if r.stall else "")),
        ("decider reads", "exact counts" if r.exact else "the workers' summaries, merged"),
        ("decider", "off" if not policy.enabled else
         f"act above max/mean {policy.balance_target:g} beyond counting noise, aim at {policy.balance_aim:g}"),
        ("hash only", f"true max/mean {r.hash_only:.3f}"),
    ])
    print_table("windows", ["window", "measured max/mean", "true max/mean", "changes", "placed", "retired",
                            "directory keys", "keys touched", "summary items", "summary bytes"],
                [(w.index, "-" if w.measured is None else f"{w.measured:.3f}", f"{w.true:.3f}", w.changes,
                  w.placed, w.retired, w.directory, w.touched, w.summary_items, w.summary_bytes)
                 for w in r.windows],
                note=f"keys touched: {r.touched} ({r.touched_fraction:.3%} of distinct keys); true max/mean "
                     + (f"<= {policy.balance_target:g} from window {r.settled_by(policy.balance_target)} on"
                        if r.settled_by(policy.balance_target) else f"above {policy.balance_target:g} at the end"))


def _print_report(r: SimulationReport) -> None:
    policy = r.policy
    print_fields("simulation", [
        ("keys", r.source),
        ("events", r.events),
        ("distinct keys", r.distinct_keys),
        ("routing", f"{r.partitions} partitions, {r.placement} + {r.hash}"),
        ("window", f"{r.window_s:g} s ({r.events / r.window_s:,.1f} events/s in all)"),
        ("decider", "off" if not policy.enabled else
         f"act above max/mean {policy.balance_target:g}, aim at {policy.balance_aim:g}"
         + ("" if policy.allow_moves else ", splits only")),
    ])
    shown = min(r.partitions, _SHOWN_PARTITIONS)
    rows = [(p, r.before.counts[p], r.after.counts[p]) for p in range(shown)]
    note = f"... {r.partitions - shown} more partitions in --json" if shown < r.partitions else ""
    print_table("events per partition", ["partition", "hash only", "with directory"], rows, note=note)
    print_table("balance", ["", "max", "mean", "min", "max/mean"], [
        ("hash only", r.before.max, r.before.mean, r.before.min, r.before.max_over_mean),
        ("with directory", r.after.max, r.after.mean, r.after.min, r.after.max_over_mean),
    ])
    if r.placed:
        print_table(f"directory: {len(r.placed)} keys ({r.touched_fraction:.3%} of distinct keys), "
                    f"{r.rounds} decider round(s)",
                    ["key", "events", "rate/s", "share", "home", "partitions"],
                    [(h.key, h.count, h.rate, f"{h.share:.1%}", h.home,
                      ("move -> " if len(h.partitions) == 1 else f"split {len(h.partitions)}: ")
                      + ",".join(map(str, h.partitions))) for h in r.placed])
    else:
        print("directory: empty (" + ("the decider is off" if not policy.enabled else
                                       "the hash alone is within the balance target") + ")\n")
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


def _plot(r: SimulationReport, path: str) -> Path:
    """Draw :func:`plot_figure` to ``path``; returns the file's absolute path."""
    import matplotlib.pyplot as plt

    fig = plot_figure(r)
    target = Path(path).resolve()
    fig.savefig(target, bbox_inches="tight", dpi=120)
    plt.close(fig)
    return target


def plot_figure(r: SimulationReport) -> Any:
    """The partition loads before and after the directory as a matplotlib Figure (Agg backend).

    The title sits on two lines (the workload's description can be long) and the
    legend under the axes, so neither is cut off or covers a bar; the figure widens
    with the partition count (up to 24 inches) and labels every partition up to 64.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitions = range(r.partitions)
    fig, ax = plt.subplots(figsize=(min(24.0, max(7.0, r.partitions * 0.45)), 5.0))
    width = 0.4
    ax.bar([p - width / 2 for p in partitions], r.before.counts, width,
           label=f"hash only (max/mean {r.before.max_over_mean:.2f})")
    ax.bar([p + width / 2 for p in partitions], r.after.counts, width,
           label=f"with directory, {len(r.placed)} keys placed (max/mean {r.after.max_over_mean:.2f})")
    ax.axhline(r.before.mean, color="grey", linestyle="--", linewidth=1, label="mean")
    if r.partitions <= 64:
        ax.set_xticks(list(partitions))
        ax.tick_params(axis="x", labelsize=8 if r.partitions > 24 else 10)
    ax.set_xlim(-0.6, r.partitions - 0.4)
    ax.set_xlabel("partition")
    ax.set_ylabel("events")
    ax.set_title(f"{r.source}\n{r.partitions} partitions, {r.placement} + {r.hash}", fontsize=10, wrap=True)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=9, frameon=False)
    fig.tight_layout()
    return fig
