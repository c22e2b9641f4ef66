"""One function per page: read what the page needs from the collector, fill its template.

A view returns an `Answer` (the template and its context, and the page's data for its
JSON twin and its downloads) or raises a gpubench error, which app.py turns into a page
that says in words what the collector answered (a refused comparison names each way the
runs differ, as the CLI does).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pandas as pd

from gpubench import answers, comparison_key, figures, frames, models, prices, record, sizes, tables
from gpubench.client import Client
from gpubench.collector.validation import MAX_GPUS
from gpubench.collector.web import charts, lists, reads
from gpubench.collector.web.lists import Column
from gpubench.errors import InvalidRecord, NotFound
from gpubench.settings import BATCH_RULES
from gpubench.v1 import collector_pb2

# Settings labels the forms offer, the default run's first: Keras's own code path and
# those with torch's kernels all on (what the agent runs); a URL may ask for any label.
SETTINGS = (record.DEFAULT_SETTINGS,
            *sorted(s for s in record.SETTINGS_LABELS if s != record.DEFAULT_SETTINGS
                    and (s == record.KERAS or s.startswith("kernels"))))
# The most runs a sorted list or a download reads (the newest that match); a list in
# its own order (newest first) pages through every run, by the collector's page tokens.
SORTED_RUNS = 2000
DOWNLOAD_RUNS = 10_000
# The most entries of a leaderboard the site ranks.
LEADERBOARD_ENTRIES = 500
# The dimensions the comparison form pins, by the collector's name for them.
FORM_FIELDS = {d.name: d.form_label for d in comparison_key.DIMENSIONS if d.form_label}
# A baseline as the comparison form's select encodes it: "2x NVIDIA H200".
BASELINE = re.compile(r"(\d{1,3})x (.+)")
# What the fit page asks when nothing is asked: the article's question.
DEFAULT_MEMORY = "16GiB"
DEFAULT_EPOCHS = 400


@dataclass
class Answer:
    """What a view answers: the page, and its data for `?format=json` (the document)
    and the downloads (`?format=csv` and `parquet`: the frame)."""

    template: str
    context: dict[str, Any]
    document: Any = None  # JSON-ready; None: the page has no JSON twin
    # None: no CSV or Parquet download. A function making it is called only for a
    # download or the JSON twin: a page of many runs is not flattened to be shown.
    frame: pd.DataFrame | Callable[[], pd.DataFrame] | None = None
    name: str = "gpubench"  # the downloaded file's name, without its suffix

    def data_frame(self) -> pd.DataFrame:
        """The page's list as a DataFrame (made now where a function was given)."""
        assert self.frame is not None
        return self.frame() if callable(self.frame) else self.frame

    @property
    def formats(self) -> tuple[str, ...]:
        """The formats this page answers in besides HTML."""
        found = ("json",) if self.document is not None or self.frame is not None else ()
        return found + (("csv", "parquet") if self.frame is not None else ())


@dataclass(frozen=True)
class Difference:
    """One way the runs of a refused comparison differ."""

    dimension: str
    values: str
    pin: str  # how to pin it: the form's field, else the CLI flag


def differences(refusal: Exception) -> list[Difference]:
    """The differences a Compare refusal carries as data (gpubench.Client's `mixed`:
    CompareResponse.mixed); none: the caller shows its words."""
    found = []
    for mixed in getattr(refusal, "mixed", ()):
        field_label = FORM_FIELDS.get(mixed.dimension)
        pin = f"choose one in {field_label} above" if field_label else \
            f"not on this page: gpubench compare {mixed.flag} ..."
        found.append(Difference(mixed.dimension.replace("_", " "),
                                comparison_key.shown(list(mixed.values)), pin))
    return found


@dataclass(frozen=True)
class Choice:
    """A <select> of a filter form."""

    name: str
    label: str
    options: tuple[tuple[str, str], ...]  # (value, text)
    value: str


@dataclass
class Filters:
    """The filters a leaderboard or comparison was asked for (its query string)."""

    settings: str = record.DEFAULT_SETTINGS
    batch_rule: str = record.DEFAULT_BATCH_RULE
    precision: str = ""
    backend: str = ""
    pipeline: str = ""
    include_flagged: bool = False
    allow_mixed: bool = False
    corroborated_only: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, query: Mapping[str, str], model: str) -> Filters:
        """Read `model`'s filters from a query string (its own default settings unless
        asked: Keras's path for all but B0-B7); bad values are refused naming the field
        (the forms only offer good ones)."""
        def one_of(name: str, allowed: tuple[str, ...], default: str) -> str:
            value = query.get(name, default)
            if value and value not in allowed:
                raise InvalidRecord(name, f"unknown {value[:64]!r} (one of "
                                          f"{', '.join(allowed)})")
            return value

        return cls(
            settings=one_of("settings", tuple(record.SETTINGS_LABELS),
                            record.default_settings(model)),
            batch_rule=one_of("batch_rule", BATCH_RULES, record.DEFAULT_BATCH_RULE),
            precision=one_of("precision", record.PRECISIONS, ""),
            backend=one_of("backend", record.BACKENDS, ""),
            pipeline=one_of("pipeline", record.PIPELINE_MODES, ""),
            include_flagged=query.get("flagged", "") in ("1", "on", "true"),
            allow_mixed=query.get("allow_mixed", "") in ("1", "on", "true"),
            corroborated_only=query.get("corroborated", "") in ("1", "on", "true"),
        )

    def choices(self, *, any_rule: bool, pipeline: bool) -> list[Choice]:
        """The form's selects, showing the current values."""
        any_option = (("", "any"),)
        settings = SETTINGS if self.settings in SETTINGS or not self.settings \
            else (*SETTINGS, self.settings)
        rows = [
            Choice("settings", "Settings",
                   (*(any_option if any_rule else ()), *((s, s) for s in settings)),
                   self.settings),
            Choice("batch_rule", "Batch rule",
                   (*(any_option if any_rule else ()), *((r, r) for r in BATCH_RULES)),
                   self.batch_rule),
            Choice("precision", "Precision", (*any_option, *((p, p) for p in record.PRECISIONS)),
                   self.precision),
            Choice("backend", "Backend", (*any_option, *((b, b) for b in record.BACKENDS)),
                   self.backend),
        ]
        if pipeline:
            rows.append(Choice("pipeline", "Pipeline",
                               (*any_option, *((p, p) for p in record.PIPELINE_MODES)),
                               self.pipeline))
        return rows

    def compare_filters(self) -> dict[str, Any]:
        """These filters as `Client.compare`'s arguments."""
        return {"precision": self.precision or None, "backend": self.backend or None,
                "settings": self.settings or None, "batch_rule": self.batch_rule or None,
                "pipeline": self.pipeline or None, "include_flagged": self.include_flagged,
                "allow_mixed": self.allow_mixed}


def model_of(name: str) -> str:
    """The model of a URL: a standard workload in any case ('b0', 'vit-b16'), or another
    model's recorded name as it is; NotFound for anything else (a page that is not)."""
    standard = {m.upper(): m for m in models.STANDARD_MODELS}
    if name.upper() in standard:
        return standard[name.upper()]
    if not models.is_record_name(name):
        raise NotFound(f"model {name[:16]!r}: no such model (one of "
                       f"{', '.join(models.STANDARD_MODELS)}, or a model's name)")
    return name


def gpu_url(gpu_name: str) -> str:
    """The GPU model page's address."""
    return "/gpu/" + quote(gpu_name, safe="")


def run_url(run_id: str) -> str:
    """A run's page address."""
    return "/run/" + quote(run_id, safe="")


def baseline_value(gpu_name: str, gpu_count: int) -> str:
    """A baseline as the comparison form's select sends it: '2x NVIDIA H200'."""
    return f"{gpu_count}x {gpu_name}"


def baseline_of(query: Mapping[str, str]) -> tuple[str, int]:
    """The baseline a query names: `baseline=2x NVIDIA H200` (as the form's select sends
    it), or `baseline=NVIDIA H200&count=2`; ('', 1) for the slowest."""
    text = record.normalize_gpu_name(query.get("baseline", ""))
    count_text = query.get("count", "")
    if count_text:
        if not count_text.isdigit() or not 0 < int(count_text) <= MAX_GPUS:
            raise InvalidRecord("count", f"must be a whole number of GPUs from 1 to {MAX_GPUS}, "
                                         f"got {count_text[:32]!r}")
        return text, int(count_text)
    found = BASELINE.fullmatch(text)
    if found and int(found.group(1)) > 0:
        return found.group(2), int(found.group(1))
    return text, 1


def _ratio(value: float) -> float:
    return value if value else float("nan")


# -- the leaderboard and the home page --------------------------------------------------


LEADERBOARD_COLUMNS = (
    Column("rank", "#", lambda r: r.entry.rank),
    Column("gpu", "GPU configuration", lambda r: r.config_name.casefold()),
    Column("epoch2", "epoch 2 (median)", lambda r: _ratio(r.entry.epoch2_median_seconds)),
    Column("img_s", "img/s", lambda r: _ratio(r.entry.train_images_per_second_median), True),
    Column("largest", figures.LARGEST_BATCH, lambda r: _ratio(r.largest_batch), True),
    Column("timed", figures.TIMED_BATCH, lambda r: _ratio(r.entry.max_batch_per_gpu), True),
    Column("memory", "peak memory", lambda r: _ratio(r.group.peak_memory_share if r.group else 0)),
    Column("energy", "energy / epoch",
           lambda r: _ratio(r.group.energy_per_epoch_median_joules if r.group else 0)),
    Column("img_j", "img/J", lambda r: _ratio(r.group.images_per_joule if r.group else 0), True),
    Column("runs", "runs", lambda r: r.entry.runs, True),
)


def overview(client: Client, query: Mapping[str, str]) -> Answer:
    """The home page: each model's top configurations at the protocol's settings."""
    boards = []
    for model in models.STANDARD_MODELS:
        board = reads.leaderboard(client, model, settings=record.default_settings(model),
                                  batch_rule=record.DEFAULT_BATCH_RULE, precision="",
                                  backend="", include_flagged=False, limit=5)
        boards.append((model, board))
    return Answer("index.html", {"boards": boards, "default_settings": record.DEFAULT_SETTINGS},
                  document={model: frames.frame_records(reads.leaderboard_frame(board))
                            for model, board in boards})


def leaderboard(client: Client, model: str, query: Mapping[str, str], path: str) -> Answer:
    """A model's leaderboard with its filters, sorted and paged as asked."""
    model = model_of(model)
    filters = Filters.of(query, model)
    sorting = lists.Sorting.of(query, LEADERBOARD_COLUMNS)
    board = reads.leaderboard(client, model, settings=filters.settings,
                              batch_rule=filters.batch_rule, precision=filters.precision,
                              backend=filters.backend, include_flagged=filters.include_flagged,
                              corroborated_only=filters.corroborated_only,
                              limit=LEADERBOARD_ENTRIES)
    # Entries that ran differently from one another say how (the collector ranks them
    # apart); one line above the table when they all ran alike.
    ways = {tuple(frames.entry_key(board.response, r.entry).items()) for r in board.rows}
    page = lists.paginate(sorting.apply(board.rows), path, query)
    return Answer("leaderboard.html", {
        "model": model, "board": board, "filters": filters, "page": page,
        "sorting": sorting, "columns": LEADERBOARD_COLUMNS,
        "choices": filters.choices(any_rule=False, pipeline=False),
        "several_ways": len(ways) > 1,
        "native_size": comparison_key.standard_value("image_size", model),
        "unit": models.unit_of(model),
    }, frame=reads.leaderboard_frame(board), name=f"{model.lower()}-leaderboard")


# -- comparisons --------------------------------------------------------------------------


COMPARE_COLUMNS = (
    Column("gpu", "GPU configuration",
           lambda g: record.gpu_config_name(g.gpu_name, g.gpu_count,
                                            g.memory_limit_bytes).casefold()),
    Column("speedup", figures.SPEEDUP, lambda g: _ratio(g.speedup), True),
    Column("epoch2", "epoch 2 (median)", lambda g: _ratio(g.epoch2_median_seconds)),
    Column("img_s", "img/s", lambda g: _ratio(g.train_images_per_second_median), True),
    Column("largest", figures.LARGEST_BATCH, lambda g: _ratio(g.largest_batch_per_gpu_max), True),
    Column("timed", figures.TIMED_BATCH, lambda g: _ratio(g.max_batch_per_gpu), True),
    Column("memory", "peak memory", lambda g: _ratio(g.peak_memory_share)),
    Column("energy", "energy / epoch", lambda g: _ratio(g.energy_per_epoch_median_joules)),
    Column("img_j", "img/J", lambda g: _ratio(g.images_per_joule), True),
    Column("runs", "runs", lambda g: g.runs, True),
)


def comparison_context(model: str, query: Mapping[str, str], path: str) -> dict[str, Any]:
    """What the comparison's form needs, whether the collector answers or refuses."""
    filters = Filters.of(query, model)
    baseline, count = baseline_of(query)
    return {"model": model, "filters": filters, "baseline": baseline,
            "baseline_count": count, "baseline_selected": baseline_value(baseline, count)
            if baseline else "", "choices": filters.choices(any_rule=True, pipeline=True),
            "baselines": [], "query": dict(query), "path": path,
            "marked_url": lists.url_with(path, query, allow_mixed="1", start=None)}


def comparison(client: Client, model: str, query: Mapping[str, str], path: str) -> Answer:
    """A comparison against a baseline GPU configuration: speedups as bars with the runs'
    spread, the table, and the published figures apart. A refusal to mix unlike runs is
    shown with the collector's words, which name each difference; asked to compare them
    anyway (`allow_mixed`), every speedup is marked and each configuration says how it
    ran where they differ."""
    model = model_of(model)
    context = comparison_context(model, query, path)
    filters: Filters = context["filters"]
    sorting = lists.Sorting.of(query, COMPARE_COLUMNS)
    response = client.compare_response(
        model, baseline=context["baseline"] or None, baseline_count=context["baseline_count"],
        **filters.compare_filters())
    page = lists.paginate(sorting.apply(list(response.groups)), path, query)
    names = [record.gpu_config_name(g.gpu_name, g.gpu_count, g.memory_limit_bytes)
             for g in page.rows]
    frame = frames.compare_frame(response)
    mixed = [tables.DIMENSION_WORDS[m] for m in tables.mixed_dimensions(frame)]
    context.update(
        response=response, names=names, page=page, sorting=sorting, columns=COMPARE_COLUMNS,
        mixed=mixed, chart=charts.speedup_chart(page.rows, names,
                                                f"{model}: {figures.SPEEDUP} over "
                                                f"{response.baseline}"),
        published_names=[record.gpu_config_name(g.gpu_name, g.gpu_count, g.memory_limit_bytes)
                         for g in response.published],
        uncatalogued_names=[record.gpu_config_name(g.gpu_name, g.gpu_count)
                            for g in response.uncatalogued],
        baselines=sorted({(baseline_value(g.gpu_name, g.gpu_count),
                           record.gpu_config_name(g.gpu_name, g.gpu_count))
                          for g in response.groups}),
    )
    return Answer("compare.html", context, document=frames.compare_document(frame),
                  frame=frames.with_uncatalogued(frame), name=f"{model.lower()}-comparison")


def cost(client: Client, model: str, query: Any, path: str) -> Answer:
    """What the cards buy: the comparison with each configuration's price (the query's
    `price=NAME=USD`, repeatable, or the form's lines of them) and its training images a
    second per 1,000 USD, as `gpubench compare --price` answers."""
    model = model_of(model)
    given = [*query.getlist("price"), *(line.strip() for line in
                                        query.get("prices", "").splitlines() if line.strip())]
    book = prices.load(given)
    context = comparison_context(model, query, path)
    filters: Filters = context["filters"]
    response = client.compare_response(
        model, baseline=context["baseline"] or None, baseline_count=context["baseline_count"],
        **filters.compare_filters())
    frame = frames.compare_frame(response)
    document = answers.cost_document(frame, book)
    cards = sorted({g.gpu_name for g in response.groups})
    context.update(response=response, document=document, prices_text="\n".join(given),
                   cards=cards, priced=len(book) > 0,
                   example="\n".join(f"{name}=" for name in cards[:3]))
    return Answer("cost.html", context, document=document,
                  frame=prices.cost_frame(frame, book) if len(book) else None,
                  name=f"{model.lower()}-cost")


# -- the answers: fit, estimate -----------------------------------------------------------


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "") in ("1", "on", "true")


def fit(client: Client, model: str, query: Mapping[str, str], path: str) -> Answer:
    """Would a card of some memory (`memory=16GiB`, or a card by name: `card=Tesla T4`)
    train the model, and at about what batch: gpubench fit's answer."""
    model = model_of(model)
    memory_text = query.get("memory", "").strip()
    card = record.normalize_gpu_name(query.get("card", ""))
    if memory_text and card:
        raise InvalidRecord("memory", "give the card's memory or its name, not both")
    if not card and not memory_text:
        memory_text = DEFAULT_MEMORY
    gpu = query.get("gpu", "")[:200].strip() or None
    include_outliers = _flag(query, "outliers")
    if card:
        memory_bytes = answers.card_memory(client, card)
    else:
        try:
            memory_bytes = sizes.card_memory(memory_text)
        except ValueError as exc:
            raise InvalidRecord("memory", str(exc)) from None
    runs = answers.read_runs(client, model, gpu, include_outliers=include_outliers)
    document = answers.fit_document(runs, model, memory_bytes, card)
    return Answer("fit.html", {
        "model": model, "document": document, "memory": "" if card else memory_text,
        "card": card, "gpu": gpu or "", "include_outliers": include_outliers,
        "cards": _cards(runs), "heading": answers.PUBLISHED_HEADING,
    }, document=document, name=f"{model.lower()}-fit")


def _cards(runs: answers.Runs) -> list[tuple[str, str]]:
    """The cards the runs were on, with their memory, for the fit form's choice."""
    found: dict[str, int] = {}
    for run in [*runs.measured, *runs.published]:
        for gpu in run.gpus:
            found.setdefault(record.normalize_gpu_name(gpu.name), gpu.memory_total_bytes)
    return [(name, record.memory_size(size)) for name, size in sorted(found.items())]


def estimate(client: Client, model: str, query: Mapping[str, str], path: str) -> Answer:
    """How long `epochs` epochs of `images` training images take on each GPU
    configuration: gpubench estimate's answer."""
    model = model_of(model)

    def whole(name: str, default: int) -> int:
        text = query.get(name, "").strip() or str(default)
        if not text.isdigit() or not 0 < int(text) <= 10**9:
            raise InvalidRecord(name, f"{text[:16]!r} is not a whole number of {name}, 1 or more")
        return int(text)

    epochs = whole("epochs", DEFAULT_EPOCHS)
    images = whole("images", record.STANDARD_TRAIN_IMAGES)
    gpu = query.get("gpu", "")[:200].strip() or None
    include_outliers = _flag(query, "outliers")
    runs = answers.read_runs(client, model, gpu, include_outliers=include_outliers)
    document = answers.estimate_document(runs, model, epochs, images, gpu)
    return Answer("estimate.html", {
        "model": model, "document": document, "epochs": epochs, "images": images,
        "gpu": gpu or "", "include_outliers": include_outliers,
        "heading": answers.PUBLISHED_HEADING,
    }, document=document, name=f"{model.lower()}-estimate")


# -- runs ---------------------------------------------------------------------------------


RUN_LIST_COLUMNS = (
    Column("created", "created (UTC)", lambda s: s.run.created_at.ToNanoseconds(), True),
    Column("model", "model", lambda s: s.run.config.model),
    Column("gpu", "GPU configuration", lambda s: summary_of(s)["config"].casefold()),
    Column("timed", figures.TIMED_BATCH, lambda s: _ratio(s.run.config.batch_per_gpu), True),
    Column("largest", figures.LARGEST_BATCH,
           lambda s: _ratio(s.run.result.largest_batch_per_gpu), True),
    Column("epoch2", "epoch 2", lambda s: _ratio(s.run.result.epoch2_seconds)),
    Column("img_s", "img/s", lambda s: _ratio(s.run.result.train_images_per_second), True),
)


def _runs_query(query: Mapping[str, str]) -> dict[str, Any]:
    """ListRuns' filters from a runs list's query string."""
    model = query.get("model", "")
    if model:
        model = model_of(model)
    backend = query.get("backend", "")
    precision = query.get("precision", "")
    if backend and backend not in record.BACKENDS:
        raise InvalidRecord("backend", f"unknown {backend[:32]!r}")
    if precision and precision not in record.PRECISIONS:
        raise InvalidRecord("precision", f"unknown {precision[:32]!r}")
    return {"model": model or None, "gpu": query.get("gpu", "")[:200] or None,
            "backend": backend or None, "precision": precision or None}


def runs(client: Client, query: Mapping[str, str], path: str, *, format: str = "") -> Answer:
    """Stored runs matching the filters (model, a part of the GPU name, backend,
    precision): newest first, a page at a time through the collector's page tokens
    (`page`), or sorted by a column among the newest SORTED_RUNS."""
    filters = _runs_query(query)
    sorting = lists.Sorting.of(query, RUN_LIST_COLUMNS)
    context: dict[str, Any] = {
        "model": filters["model"] or "", "gpu": filters["gpu"] or "",
        "backend": filters["backend"] or "", "precision": filters["precision"] or "",
        "sorting": sorting, "columns": RUN_LIST_COLUMNS, "query": dict(query), "path": path,
        "capped": False, "sorted_runs": SORTED_RUNS,
    }
    name = "runs"
    if format in ("json", "csv", "parquet"):
        listed = list(client.iter_runs(**filters, limit=DOWNLOAD_RUNS, page_size=500))
        return Answer("runs.html", context, frame=frames.runs_frame(listed), name=name)
    if sorting.column is None:
        token = query.get("page", "")
        listed, following = client.runs_page(token, **filters, page_size=lists.PAGE_SIZE)
        page = lists.Page(listed, 0, len(listed))
        page.next = lists.url_with(path, query, page=following) if following else ""
        page.first = lists.url_with(path, query, page=None) if token else ""
    else:
        listed = list(client.iter_runs(**filters, limit=SORTED_RUNS + 1, page_size=500))
        context["capped"] = len(listed) > SORTED_RUNS
        page = lists.paginate(sorting.apply(listed[:SORTED_RUNS]), path, query)
    context["page"] = page
    return Answer("runs.html", context, frame=lambda: frames.runs_frame(page.rows), name=name)


def gpu(client: Client, name: str, query: Mapping[str, str], path: str) -> Answer:
    """A GPU model's page: its card, and its runs by model, newest first (or sorted),
    a page at a time; NotFound when no stored run was on a GPU of that name."""
    wanted = record.normalize_gpu_name(name)
    stored = reads.gpu_runs(client, wanted)
    if not stored.runs:
        raise NotFound(f"No runs on a GPU named {wanted[:200]}.")
    sorting = lists.Sorting.of(query, RUN_LIST_COLUMNS)
    card = next((g for s in stored.runs for g in s.run.gpus
                 if record.normalize_gpu_name(g.name) == wanted), None)
    by_model = {}
    for model in dict.fromkeys(s.run.config.model for s in stored.runs):
        members = sorting.apply([s for s in stored.runs if s.run.config.model == model])
        if members:
            by_model[model] = lists.paginate(members, path, query, name=f"{model.lower()}_start")
    return Answer("gpu.html", {
        "name": wanted, "stored": stored, "card": card, "by_model": by_model,
        "sorting": sorting, "columns": RUN_LIST_COLUMNS, "query": dict(query), "path": path,
        "counts": sorted({s.run.config.gpu_count for s in stored.runs}),
    }, frame=lambda: frames.runs_frame(stored.runs), name="gpu-runs")


def run(client: Client, run_id: str, query: Mapping[str, str], path: str) -> Answer:
    """One run's whole record, in words; its JSON twin is the record as stored."""
    stored = client.get_run(run_id)
    r = stored.run
    facts = tables.run_facts(stored)
    return Answer("run.html", {
        "stored": stored, "run": r, "facts": facts, "facts_map": dict(facts),
        "short_id": stored.short_id or r.run_id,
        "step_rate": record.step_images_per_second(r),
        "config_name": record.gpu_config_name(
            record.normalize_gpu_name(r.gpus[0].name) if r.gpus else "",
            r.config.gpu_count, r.config.memory_limit_bytes),
        "options": [(tables.SETTING_WORDS[option], getattr(r.config, option))
                    for option, _ in record.SETTINGS_OPTIONS],
    }, document=frames.stored_run_dict(stored), name=f"run-{stored.short_id or r.run_id}")


def summary_of(stored: collector_pb2.StoredRun) -> dict[str, Any]:
    """What a runs table shows of a run (used by templates through a global)."""
    r = stored.run
    gpu_name = record.normalize_gpu_name(r.gpus[0].name) if r.gpus else ""
    return {
        "url": run_url(r.run_id), "run_id": r.run_id, "short_id": stored.short_id or r.run_id,
        "model": r.config.model, "gpu_name": gpu_name,
        "gpu_url": gpu_url(gpu_name) if gpu_name else "",
        "config": record.gpu_config_name(gpu_name, r.config.gpu_count,
                                         r.config.memory_limit_bytes),
        "created": r.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M")
        if r.HasField("created_at") else "",
        "backend": r.software.backend, "precision": r.config.precision,
        "settings": record.settings_label(r.config), "batch_rule": r.config.batch_rule,
        "batch_per_gpu": r.config.batch_per_gpu, "global_batch": r.config.global_batch,
        "gpu_count": r.config.gpu_count, "largest": r.result.largest_batch_per_gpu,
        "largest_capped": r.result.largest_batch_capped,
        "epoch2": r.result.epoch2_seconds,
        "images_per_second": r.result.train_images_per_second,
        "rate_unit": figures.rate_unit(models.unit_of(r.config.model, r.config.unit)),
        "status": record.status_name(r.result.status), "label": r.label,
        "flagged": stored.flagged, "outlier": stored.outlier, "published": r.published,
        "unrecognised": stored.gpu_unrecognised,
    }
