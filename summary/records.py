"""The records summary.json holds (docs/summary.md names each key), written by to_json and
read back by from_json; a key absent from summary.json is UNSET here."""

import json

import msgspec
from msgspec import UNSET, UnsetType

CAPTURED_NOTE = " [a CUDA graph captured here, replayed at {}]"


def known(value: object) -> object:  # None where summary.json has no such key
    return None if value is UNSET else value


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A record of summary.json: a field left at its default is not written."""


class Frame(msgspec.Struct, array_like=True, frozen=True):
    """A frame of the user's, [file, line, function, repeats] in summary.json."""

    file: str
    line: int
    function: str
    repeats: int = 1  # a recursion's frame repeated this many times

    def text(self, line_before: int | None = None) -> str:
        """file:line function (xN); line_before, where an edit moved it: file:before->line."""
        line = self.line if line_before in (None, self.line) else f"{line_before}->{self.line}"
        return f"{self.file}:{line} {self.function}" + f" (x{self.repeats})" * (self.repeats > 1)


class SiteKernel(Record, kw_only=True):  # a kernel a call site launched
    name: str
    readable_name: str = ""
    launches: int | None
    ms: float


class CallSite(Record, kw_only=True):
    """A chain of the user's frames that launched GPU work; callsite: frame_texts() joined."""

    callsite: str
    source: str | None
    ms: float
    kernels: list[SiteKernel]
    frames: list[Frame]
    outer_frames: int = 0  # frames above the innermost MAX_FRAMES, left out
    autotuning: bool = False  # launched by Triton's autotuner timing its configs
    replayed_at: list[Frame] | None = None  # a CUDA graph's: where it was replayed

    def frame_texts(self, lines_before: tuple = ()) -> list[str]:
        """Each frame as text, outermost first, the notes on the innermost; lines_before:
        each frame's line before an edit (the replay site's after)."""
        before = iter(lines_before)
        texts = [f"[{self.outer_frames} outer frames]"] * bool(self.outer_frames)
        texts += [f.text(next(before, None)) for f in self.frames] or [""]
        texts[-1] += " [autotuning]" * self.autotuning
        if self.replayed_at is not None:
            replayed = " > ".join(f.text(next(before, None)) for f in self.replayed_at)
            texts[-1] += CAPTURED_NOTE.format(replayed)
        return texts


class Kernel(Record, kw_only=True):
    """A kernel's launches in all, with its rates where the capture has what they need."""

    name: str
    readable_name: str
    launches: int | None
    total_ms: float
    mean_us: float | None
    share: float
    tuning_ms: float = 0.0  # of the launches by Triton's autotuner timing its configs
    tuning_launches: int = 0
    gbyte_per_s: float | None | UnsetType = UNSET
    peak_gbyte_per_s: float | None | UnsetType = UNSET
    pct_of_peak_bw: float | None | UnsetType = UNSET
    pct_of_ceiling_bw: float | UnsetType = UNSET
    l2_resident: bool | UnsetType = UNSET
    flop_per_s: float | UnsetType = UNSET
    flop8_per_s: float | UnsetType = UNSET
    flop16_per_s: float | UnsetType = UNSET
    flop32_per_s: float | UnsetType = UNSET
    flop64_per_s: float | UnsetType = UNSET
    pct_of_peak_flops: float | UnsetType = UNSET
    min_us: float | UnsetType = UNSET
    median_us: float | UnsetType = UNSET
    p90_us: float | UnsetType = UNSET
    max_us: float | UnsetType = UNSET


class Spread(Record, kw_only=True):  # a kernel's time in each trial of a run
    name: str
    readable_name: str = ""
    mean_ms: float
    min_ms: float
    max_ms: float
    cv: float | None
    times_ms: list[float]


class Trials(Record, kw_only=True):  # each kernel's spread, the largest first
    n: int
    kernels: list[Spread]


class Row(Record, kw_only=True):  # the GPU time, a kernel or a call site, compared
    name: str | UnsetType = UNSET
    readable_name: str | UnsetType = UNSET
    callsite: str | UnsetType = UNSET  # now's, each line an edit moved as old->new
    base_ms: float
    ms: float
    n_base: int
    n: int
    base_times_ms: list[float] | None
    times_ms: list[float] | None
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str  # same, slower, faster, inconclusive; new, gone; ambiguous
    regression: bool
    tuning: bool = False

    def label(self) -> str:
        return self.readable_name or self.callsite or ""


class Comparison(Record, kw_only=True, omit_defaults=False):  # proton_diff
    base: str
    interleaved: bool
    alpha: float
    rows_judged: int
    alpha_divisor: int = 1  # what make ab's added rounds divide this look's rate by
    method: str = ""
    same: float = 2.0
    fail_above: float | None = None
    min_ms: float = 0.005
    total: Row | None = None
    kernels: list[Row] = []
    callsites: list[Row] = []
    regressions: list[str] = []
    caveats: list[str] = []
    devices_differ: bool = False
    base_provenance: dict | None = None
    first_line: str = ""
    gate: list[str] = []  # the gate's outcome, then each regression as stderr names it


class Summary(Record, kw_only=True, omit_defaults=False):
    """summary.json, its keys in the order written."""

    proton_artifact_dir: str
    proton_kernel_count: int | UnsetType = UNSET
    proton_gpu_time_ms: float | UnsetType = UNSET
    proton_top_kernel_ms: float | UnsetType = UNSET
    proton_top_kernels: list[str] | UnsetType = UNSET
    proton_context: str | UnsetType = UNSET
    proton_device: list[dict] | UnsetType = UNSET
    proton_provenance: dict | None | UnsetType = UNSET
    proton_unread: list[dict] | UnsetType = UNSET
    proton_kernels: list[Kernel] = []
    proton_callsites: list[CallSite] = []
    proton_timeline: list[dict] | UnsetType = UNSET
    proton_ranks: list[dict] | UnsetType = UNSET
    proton_rank_imbalance: float | None | UnsetType = UNSET
    proton_rank_start_skew: dict | None | UnsetType = UNSET
    proton_scopes: list[dict] | UnsetType = UNSET
    proton_sm_spread: list[dict] | UnsetType = UNSET
    proton_cpu_scopes: list[dict] | UnsetType = UNSET
    proton_trials: Trials | UnsetType = UNSET
    proton_diff: Comparison | UnsetType = UNSET
    headline: str | UnsetType = UNSET


def to_json(summary: Summary) -> bytes:
    """summary.json's text, one key a line (indenting every level costs more than encoding)."""
    keys = msgspec.structs.asdict(summary)
    keys = {
        k: v
        for k, v in keys.items()
        if v is not UNSET and (v != [] or summary.proton_unread is not UNSET)
    }
    try:
        pairs = [(key, msgspec.json.encode(value)) for key, value in keys.items()]
    except UnicodeEncodeError:  # a lone surrogate (a path not UTF-8, a name): json escapes it
        plain = {k: msgspec.to_builtins(v) for k, v in keys.items()}
        pairs = [(k, json.dumps(v, allow_nan=False).encode()) for k, v in plain.items()]
    lines = (b'  "%s": %s' % (key.encode(), value) for key, value in pairs)
    return b"{\n" + b",\n".join(lines) + b"\n}\n"


def from_json(data: bytes | str) -> Summary:
    """A summary.json read back into its records (ValueError says why it is not one)."""
    try:
        return msgspec.json.decode(data, type=Summary)
    except msgspec.DecodeError as e:
        raise ValueError(f"not a summary.json: {str(e)[:200]}") from None
