"""Whether a run's figures hang together, and whether they are believable.

Two kinds of trouble, kept apart:

- `inconsistencies`: the record contradicts itself (epoch 2 is not its measured epoch's
  wall time, images/s disagrees with images over time, step times do not add up to the
  epoch, energy is not power x time, power far beyond the card's own limit). Such a
  record is refused, each field named (collector.validation calls this).
- `implausibilities`: the record is consistent but claims more than the card can do: a
  training rate past the card's peak FLOP/s or memory bandwidth (collector.ceilings), or
  past the fastest run verified on that card in the same configuration by more than a
  stated margin; a card with more memory or a higher power limit than any of its name;
  energy the card cannot have drawn in the epoch's time (a GPU that trains draws far
  more than nothing: 1e-300 J is no measurement); a GPU name
  the catalogue does not know (collector.ceilings). Such a run is stored, flagged with
  the reasons, and left out of Compare, outlier groups and the leaderboard unless asked
  for.

The tolerances are wide: they are set from every run in docs/results (which all pass;
bench/plausibility_margins.py shows how close each comes) so that an honest run is never
refused; what they catch is fabrication, and the ceilings catch what is fabricated
consistently.
"""

from __future__ import annotations

import math

from gpubench import models, record
from gpubench.collector import ceilings
from gpubench.v1 import run_pb2

GIB = 1 << 30
# epoch2_seconds is the measured epoch's wall time (the workload rounds both to 1 us);
# startup_seconds is epoch 1's minus it.
SAME_TIME_RELATIVE = 0.01
SAME_TIME_ABSOLUTE = 0.002
# An epoch's training and validation parts fit in its wall time (the parts are taken at
# callbacks inside it); a little slack for rounding.
PARTS_SLACK_RELATIVE = 0.02
PARTS_SLACK_ABSOLUTE = 0.01
# Images/s covers the measured epoch's steps after the first, images over time the whole
# training part: real runs are 0.75-1.02x apart (docs/results); 3x is not measurement.
RATE_FACTOR = 3.0
# The full-sized steps at the median step time against the training part: real runs
# 0.30-1.00x (a few slow steps pull the mean over the median); steps cannot take half
# again as long as the epoch they are in, nor a twentieth of it.
STEPS_OVER = 1.5
STEPS_UNDER = 1 / 20
# Both step checks hold an epoch of this many full steps or more: in a shorter one the
# first step (left out of images/s and the median) can be most of the epoch on an honest,
# busy machine (a CPU epoch of 2 steps was refused so). The protocol's speed batch
# leaves at least 8 steps an epoch (docs/protocol.md, "The batch").
STEPS_CHECKED = 8
# Energy is mean power x the epoch's time (the agent divides one by the other); 10% and
# a joule of slack for the window's edges.
ENERGY_RELATIVE = 0.10
ENERGY_ABSOLUTE = 1.0
# A mean power over an epoch stays under the cards' power limit; half again for the energy
# counter's interpolation over a short epoch (real runs reach 0.94x of it). The record's
# own power limit and the catalogue's alike.
POWER_LIMIT_FACTOR = 1.5
# The least mean power over a training epoch, as a share of the cards' power limit in the
# catalogue. The project's real runs draw 0.19-0.94x of it (docs/results:
# bench/plausibility_margins.py); an idle H200 draws 80 W of 700 (0.11x), so a twentieth
# is far under any card that trains, and still 35 W on an H200.
LEAST_POWER_SHARE = 0.05
# A card's memory and power limit against the largest of its name in the table (NVML
# reports a little less or more than the datasheet's round figure).
MEMORY_FACTOR = 1.05
POWER_FACTOR = 1.25
# A CPU run's ceiling: a core's peak float32 rate, two AVX-512 FMA units of 16 lanes at
# 4 GHz (no CPU core does more; training reaches a fraction of it), and the most
# (logical) cores a host has: eight sockets of 64 cores, two threads each.
CPU_GFLOPS_PER_CORE = 256.0
MOST_CPU_CORES = 1024


def inconsistencies(run: run_pb2.Run) -> list[tuple[str, str]]:
    """Where the record contradicts itself, as (field path, why); empty when it does not."""
    found: list[tuple[str, str]] = []
    res, cfg = run.result, run.config
    epochs = {epoch.number: (i, epoch) for i, epoch in enumerate(res.epochs)}
    for i, epoch in enumerate(res.epochs):
        _epoch_parts(found, f"run.result.epochs[{i}]", epoch)
        _energy(found, f"run.result.epochs[{i}]", epoch.energy_joules, epoch.mean_power_watts,
                epoch.wall_seconds)
    limit = _power_limit(run)
    if limit:
        for i, epoch in enumerate(res.epochs):
            _power(found, f"run.result.epochs[{i}].mean_power_watts", epoch.mean_power_watts,
                   limit)
        _power(found, "run.result.mean_power_watts", res.mean_power_watts, limit)
    measured = epochs.get(res.measured_epoch)
    if measured is None:
        return found
    at, epoch = f"run.result.epochs[{measured[0]}]", measured[1]
    if res.epoch2_seconds and epoch.wall_seconds and not _same(res.epoch2_seconds,
                                                               epoch.wall_seconds):
        found.append(("run.result.epoch2_seconds",
                      f"is {res.epoch2_seconds:g} s but its measured epoch {res.measured_epoch} "
                      f"took {epoch.wall_seconds:g} s ({at}.wall_seconds)"))
    first = epochs.get(1)
    if first is not None and res.measured_epoch != 1 and first[1].wall_seconds and \
            epoch.wall_seconds:
        expected = first[1].wall_seconds - epoch.wall_seconds
        if not _same(res.startup_seconds, expected, scale=first[1].wall_seconds):
            found.append(("run.result.startup_seconds",
                          f"must be epoch 1 minus epoch {res.measured_epoch} = {expected:g} s, "
                          f"got {res.startup_seconds:g}"))
    if epoch.energy_joules and res.energy_per_epoch_joules and not _same(
            res.energy_per_epoch_joules, epoch.energy_joules):
        found.append(("run.result.energy_per_epoch_joules",
                      f"must be the measured epoch's energy {epoch.energy_joules:g} J "
                      f"({at}.energy_joules), got {res.energy_per_epoch_joules:g}"))
    if epoch.mean_power_watts and res.mean_power_watts and not _same(
            res.mean_power_watts, epoch.mean_power_watts):
        found.append(("run.result.mean_power_watts",
                      f"must be the measured epoch's mean power {epoch.mean_power_watts:g} W "
                      f"({at}.mean_power_watts), got {res.mean_power_watts:g}"))
    _rate(found, cfg, res, epoch)
    _steps(found, cfg, res, epoch)
    return found


def _same(value: float, expected: float, *, scale: float | None = None) -> bool:
    tolerance = SAME_TIME_RELATIVE * abs(scale if scale is not None else expected)
    return abs(value - expected) <= tolerance + SAME_TIME_ABSOLUTE


def _epoch_parts(found: list[tuple[str, str]], at: str, epoch: run_pb2.Epoch) -> None:
    wall = epoch.wall_seconds
    if not wall:
        return
    room = wall * (1 + PARTS_SLACK_RELATIVE) + PARTS_SLACK_ABSOLUTE
    for name in ("train_seconds", "validation_seconds"):
        part = getattr(epoch, name)
        if part > room:
            found.append((f"{at}.{name}", f"{part:g} s is more than the epoch's wall time "
                                          f"{wall:g} s"))
            return
    both = epoch.train_seconds + epoch.validation_seconds
    if both > room:
        found.append((f"{at}.train_seconds", f"training {epoch.train_seconds:g} s and validation "
                                             f"{epoch.validation_seconds:g} s are more than the "
                                             f"epoch's wall time {wall:g} s"))


def _energy(found: list[tuple[str, str]], at: str, joules: float, watts: float,
            seconds: float) -> None:
    if not (joules and watts and seconds):
        return
    expected = watts * seconds
    if abs(joules - expected) > ENERGY_RELATIVE * max(joules, expected) + ENERGY_ABSOLUTE:
        found.append((f"{at}.energy_joules",
                      f"{joules:g} J is not mean power x wall time ({watts:g} W x {seconds:g} s "
                      f"= {expected:g} J)"))


def _power_limit(run: run_pb2.Run) -> float:
    """The run's GPUs' power limits together; 0 where any is unknown."""
    gpus = list(run.gpus[: run.config.gpu_count or len(run.gpus)])
    if not gpus or any(gpu.power_limit_watts <= 0 for gpu in gpus):
        return 0.0
    return sum(gpu.power_limit_watts for gpu in gpus)


def _power(found: list[tuple[str, str]], at: str, watts: float, limit: float) -> None:
    if watts > limit * POWER_LIMIT_FACTOR:
        found.append((at, f"{watts:g} W is more than {POWER_LIMIT_FACTOR:g}x the power limit of "
                          f"the run's GPUs ({limit:g} W, run.gpus[].power_limit_watts)"))


def _rate(found: list[tuple[str, str]], cfg: run_pb2.Config, res: run_pb2.Result,
          epoch: run_pb2.Epoch) -> None:
    if not (res.train_images_per_second and epoch.train_seconds and cfg.train_images):
        return
    if not cfg.global_batch or cfg.train_images // cfg.global_batch < STEPS_CHECKED:
        return
    # The rate counts the run's unit: a language model's tokens, each sample many of them.
    unit = models.unit_of(cfg.model, cfg.unit)
    each = models.per_sample(unit, cfg.input_spec)
    if not each:
        found.append(("run.config.input_spec", f"{cfg.input_spec[:80]!r} does not say how "
                      "many tokens a sample holds (e.g. 'tokens 1024 of 50257')"))
        return
    short = "tok/s" if unit == models.TOKENS else "img/s"
    from_time = cfg.train_images * each / epoch.train_seconds
    ratio = res.train_images_per_second / from_time
    if not 1 / RATE_FACTOR <= ratio <= RATE_FACTOR:
        found.append(("run.result.train_images_per_second",
                      f"{res.train_images_per_second:g} {short} disagrees with the measured "
                      f"epoch: {cfg.train_images} training "
                      f"{'images' if each == 1 else f'sequences of {each} tokens'} in "
                      f"{epoch.train_seconds:g} s is {from_time:.4g} {short} (more than "
                      f"{RATE_FACTOR:g}x apart)"))


def _steps(found: list[tuple[str, str]], cfg: run_pb2.Config, res: run_pb2.Result,
           epoch: run_pb2.Epoch) -> None:
    full = cfg.train_images // cfg.global_batch if cfg.global_batch else 0
    if not (res.step_time_median_seconds and epoch.train_seconds and full >= STEPS_CHECKED):
        return
    total = res.step_time_median_seconds * full
    if total > epoch.train_seconds * STEPS_OVER + PARTS_SLACK_ABSOLUTE:
        why = f"more than {STEPS_OVER:g}x"
    elif total < epoch.train_seconds * STEPS_UNDER:
        why = f"less than 1/{1 / STEPS_UNDER:g} of"
    else:
        return
    found.append(("run.result.step_time_median_seconds",
                  f"{full} full steps of {res.step_time_median_seconds:g} s add up to "
                  f"{total:.4g} s, {why} the measured epoch's {epoch.train_seconds:g} s of "
                  "training"))


# -- implausible ----------------------------------------------------------------------


def claimed_rate(run: run_pb2.Run) -> float:
    """The most the record claims, in its unit a second (training images, a language
    model's tokens): its rate, or its training samples over the measured epoch's
    training (or whole) time; 0 if none."""
    res, cfg = run.result, run.config
    rates = [res.train_images_per_second]
    epoch = record.measured_epoch(run)
    each = models.per_sample(models.unit_of(cfg.model, cfg.unit), cfg.input_spec)
    if cfg.train_images and each:
        if epoch is not None and epoch.train_seconds > 0:
            rates.append(cfg.train_images * each / epoch.train_seconds)
        if res.epoch2_seconds > 0:
            rates.append(cfg.train_images * each / res.epoch2_seconds)
    return max((r for r in rates if r > 0 and math.isfinite(r)), default=0.0)


def pixels(config: run_pb2.Config) -> float:
    """How many times the pixels of its model's native size the run's images have (a
    training image's cost scales with them); 1 where the model has no native size."""
    native = (record.NATIVE_IMAGE_SIZE.get(config.model)
              or models.STANDARD_IMAGE_SIZE.get(config.model, 0))
    return (config.image_size / native) ** 2 if native and config.image_size else 1.0


def implausibilities(run: run_pb2.Run, specs: ceilings.Specs | None = None) -> list[str]:
    """Why the run is not believable (empty: nothing found), one reason each."""
    specs = specs or ceilings.specs()
    cfg = run.config
    used = list(run.gpus[: cfg.gpu_count])
    if not used:  # a CPU run: held to its host's cores
        ok = run.result.status == run_pb2.RUN_STATUS_OK
        return _cpu_too_fast(run, specs) if ok else []
    reasons: list[str] = []
    cards = []
    for gpu in used:
        name = record.normalize_gpu_name(gpu.name)
        spec = specs.spec_of(name)
        cards.append((name, spec or specs.unknown, spec is not None))
        if spec is None:
            reasons.append(ceilings.unrecognised_reason(specs, name))
        held = spec or specs.unknown
        card = name if spec else f"no known GPU ({name})"
        if gpu.memory_total_bytes > held.memory_gib * GIB * MEMORY_FACTOR:
            reasons.append(f"{card} has at most {held.memory_gib:g} GiB of memory; the record "
                           f"says {gpu.memory_total_bytes / GIB:.1f} GiB")
        if gpu.power_limit_watts > held.power_watts * POWER_FACTOR:
            reasons.append(f"{card} allows at most {held.power_watts:g} W; the record's power "
                           f"limit is {gpu.power_limit_watts:g} W")
    reasons = list(dict.fromkeys(reasons))  # one line for several cards alike
    if run.result.status == run_pb2.RUN_STATUS_OK:
        reasons += _too_fast(run, specs, cards)
        reasons += _beyond_expectation(run, specs, cards)
        reasons += _energy_beyond_cards(run, [spec for _, spec, _ in cards])
    return reasons


def _too_fast(run: run_pb2.Run, specs: ceilings.Specs,
              cards: list[tuple[str, ceilings.GpuSpec, bool]]) -> list[str]:
    cfg = run.config
    cost = specs.models.get(cfg.model)
    native = record.NATIVE_IMAGE_SIZE.get(cfg.model, 0)
    rate = claimed_rate(run)
    if cost is None or not native or not cfg.image_size or not rate:
        return []
    share = pixels(cfg)  # an image's cost scales with its pixels
    what = f"{cfg.model} at {_rate_text(rate)} training images/s"
    names = " + ".join(dict.fromkeys(name for name, _, _ in cards))
    known = all(found for _, _, found in cards)
    whose = f"{len(cards)}x {names}" if known else f"{len(cards)} GPU(s) as fast as any known"
    reasons = []
    flops = sum(spec.peak_tflops(cfg.precision) for _, spec, _ in cards) * 1e12
    most = flops / (cost.gflop_per_image * 1e9 * share)
    if rate > most:
        reasons.append(f"{what} is more than {whose} can compute ({flops / 1e12:,.0f} TFLOP/s at "
                       f"{cost.gflop_per_image * share:.3g} GFLOP an image: at most "
                       f"{_rate_text(most)} img/s)")
    bandwidth = sum(spec.bandwidth_gb_s for _, spec, _ in cards) * 1e9
    written = cost.mb_per_image * 1e6 * share * ceilings.written_share(cfg.precision)
    most = bandwidth / written
    if rate > most:
        reasons.append(f"{what} is more than the memory of {whose} can write ("
                       f"{bandwidth / 1e9:,.0f} GB/s, at least {written / 1e6:.3g} MB an image: "
                       f"at most {_rate_text(most)} img/s)")
    if not known:
        # A card not yet catalogued may be new, and faster than any the project measured
        # (a generation beyond the fastest verified card): UNCATALOGUED_MARGIN times that
        # card's fastest run, no more. It is shown apart, never ranked, either way.
        best = max((v for v in specs.verified if v.model == cfg.model),
                   key=lambda v: v.images_per_second, default=None)
        if best is not None:
            most = best.images_per_second * len(cards) / share * ceilings.UNCATALOGUED_MARGIN
            if rate > most:
                reasons.append(f"{what} is more than {ceilings.UNCATALOGUED_MARGIN:g}x the fastest "
                               f"verified run of any card ({_rate_text(best.images_per_second)}"
                               f" img/s a GPU, {best.gpu}, {best.record})")
    return reasons


def _beyond_expectation(run: run_pb2.Run, specs: ceilings.Specs,
                        cards: list[tuple[str, ceilings.GpuSpec, bool]]) -> list[str]:
    """Why the run is faster than its card may be (empty: it is not, or nothing is
    expected of it): past the margin over the card's verified run of its configuration,
    or over another card's scaled to it (ceilings.Specs.expectation). Several cards of
    one kind are held to as many times one; a mix of kinds, to the peaks alone."""
    cfg = run.config
    rate = claimed_rate(run)
    if not rate or not all(found for _, _, found in cards) or \
            len({spec.name for _, spec, _ in cards}) != 1:
        return []
    name, spec, _ = cards[0]
    expected = specs.expectation(spec, cfg.model, record.settings_label(cfg), cfg.precision,
                                 record.batch_rule(cfg))
    if expected is None:
        return []
    per_run = len(cards) / pixels(cfg)
    if rate <= expected.ceiling * per_run:
        return []
    tokens = models.unit_of(cfg.model, cfg.unit) == models.TOKENS
    unit = "tok/s" if tokens else "img/s"
    what = f"{cfg.model} at {_rate_text(rate)} training {'tokens' if tokens else 'images'}/s"
    best = expected.verified
    if best.gpu == spec.name and expected.scale == 1.0:
        return [f"{what} is more than {expected.margin:g}x the fastest verified {name} run "
                f"of {expected.alike} ({_rate_text(best.images_per_second)} {unit} a GPU, "
                f"{best.record})"]
    return [f"{what} is more than the {_rate_text(expected.ceiling * per_run)} {unit} "
            f"{len(cards)}x {name} may reach: {expected.margin:g}x the "
            f"{_rate_text(expected.rate * per_run)} {unit} expected of it, the verified "
            f"{best.gpu} run of {expected.alike} ({_rate_text(best.images_per_second)} {unit} "
            f"a GPU, {best.record}) scaled by {expected.scale:.3g}, "
            f"{ceilings.scaling_words(cfg.model)}"]


def _cpu_too_fast(run: run_pb2.Run, specs: ceilings.Specs) -> list[str]:
    """Why a CPU run (no GPU) is not believable: more cores than any host has, or a
    training rate past its cores' peak FLOP/s (CPU_GFLOPS_PER_CORE each)."""
    cfg = run.config
    cost = specs.models.get(cfg.model)
    native = record.NATIVE_IMAGE_SIZE.get(cfg.model, 0)
    rate = claimed_rate(run)
    reasons = []
    cores = run.host.cpu_cores or MOST_CPU_CORES  # not said: the most any host has
    if cores > MOST_CPU_CORES:
        reasons.append(f"a host of {cores:,} CPU cores (run.host.cpu_cores): no host has "
                       f"more than {MOST_CPU_CORES:,}")
        cores = MOST_CPU_CORES
    if cost is None or not native or not cfg.image_size or not rate:
        return reasons
    gflop = cost.gflop_per_image * (cfg.image_size / native) ** 2
    most = cores * CPU_GFLOPS_PER_CORE / gflop
    if rate > most:
        reasons.append(f"{cfg.model} at {_rate_text(rate)} training images/s on the CPU is more "
                       f"than {cores:,} cores can compute ({CPU_GFLOPS_PER_CORE:g} GFLOP/s a "
                       f"core at {gflop:.3g} GFLOP an image: at most {_rate_text(most)} img/s)")
    return reasons


def _rate_text(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _energy_beyond_cards(run: run_pb2.Run, cards: list[ceilings.GpuSpec]) -> list[str]:
    """Why the run's energy is not believable on these cards (empty: it is, or the run
    measured none), one reason each: over the measured epoch's wall time it makes a mean
    power between LEAST_POWER_SHARE of the cards' power limit and POWER_LIMIT_FACTOR x it;
    images per joule is so bounded by the card."""
    res = run.result
    epoch = record.measured_epoch(run)
    joules = res.energy_per_epoch_joules or (epoch.energy_joules if epoch else 0.0)
    seconds = (epoch.wall_seconds if epoch else 0.0) or res.epoch2_seconds
    if not (joules > 0 and seconds > 0 and cards):
        return []
    limit = sum(card.power_watts for card in cards)
    watts = joules / seconds
    names = " + ".join(dict.fromkeys(card.name for card in cards))
    if watts < limit * LEAST_POWER_SHARE:
        least = limit * LEAST_POWER_SHARE * seconds
        found = (f"{joules:g} J in the measured epoch's {seconds:g} s is a mean "
                 f"{watts:.3g} W, less than {LEAST_POWER_SHARE:g}x the power limit of "
                 f"{len(cards)}x {names} ({limit:g} W)")
        if run.config.train_images:
            found += (f": {run.config.train_images / joules:.3g} images per joule, at most "
                      f"{run.config.train_images / least:.3g} on these cards")
        return [found]
    if watts > limit * POWER_LIMIT_FACTOR:
        return [f"{joules:g} J in the measured epoch's {seconds:g} s is a mean {watts:,.0f} W, "
                f"more than {POWER_LIMIT_FACTOR:g}x the power limit of {len(cards)}x {names} "
                f"({limit:g} W)"]
    return []
