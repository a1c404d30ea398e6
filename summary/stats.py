"""The statistics a comparison weighs rows by: a ratio's simultaneous interval on log times
(Welch's t, or Yuen's trimmed means from TRIMMED_FROM trials a side) and Student's t
quantile; docs/summary.md's "Compare" states them."""

import math
import statistics

ALPHA = 0.05  # of all rows together: simultaneous 95% intervals
TRIM = 0.2  # Yuen's: the fastest and slowest 20% of a side's trials set aside
TRIMMED_FROM = 10  # trials a side, each side: below it a trimmed side keeps too few


def t_quantile(p: float, v: float) -> float:
    """Student's t quantile for 0.5 < p < 1 and v >= 1 degrees of freedom: the t whose upper
    tail, I_x(v/2, 1/2) / 2 at x = v / (v + t^2) (Abramowitz and Stegun 26.7.1), is 1 - p.
    Newton's method on ln t against ln of the tail, near a line in it, from the
    Cornish-Fisher expansion (A&S 26.7.5), or for few degrees the tail's power law."""
    q, z = 1 - p, statistics.NormalDist().inv_cdf(p)
    log_b = log_beta_half(v / 2)
    if v < 6:  # the tail ~ v^(v/2 - 1/2) t^-v / B(v/2, 1/2)
        t = math.exp(((v - 1) / 2 * math.log(v) - log_b - math.log(q)) / v)
    else:
        g = [(z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96]
        g += [(3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384]
        g += [(79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160]
        t = z + sum(gi / v ** (i + 1) for i, gi in enumerate(g))
    for _ in range(50):
        tail = upper_tail(t, v, log_b)
        density = math.exp(-(v + 1) / 2 * math.log1p(t * t / v) - 0.5 * math.log(v) - log_b)
        step = (math.log(tail) - math.log(q)) * tail / (density * t)
        t *= math.exp(step)
        if abs(step) < 1e-9:  # quadratic convergence: the error now is below 1e-16
            break
    return t


def log_beta_half(a: float) -> float:
    """ln B(a, 1/2); for large a by the asymptotic series of ln Gamma(a + 1/2) - ln Gamma(a),
    as lgamma's difference there loses digits."""
    if a < 30:
        return math.lgamma(a) + math.lgamma(0.5) - math.lgamma(a + 0.5)
    series = 0.5 * math.log(a) - 1 / (8 * a) + 1 / (192 * a**3) - 1 / (640 * a**5)
    return math.lgamma(0.5) - series - 17 / (14336 * a**7)


def upper_tail(t: float, v: float, log_b: float) -> float:
    """Student's upper tail at t, I_x(v/2, 1/2) / 2 at x = v / (v + t^2), by the incomplete
    beta's continued fraction (modified Lentz; Numerical Recipes' betacf), fast for x below
    (a + 1) / (a + 3/2), as in a tail; log_b: ln B(v/2, 1/2)."""
    a, x = v / 2, v / (v + t * t)
    front = math.exp(-a * math.log1p(t * t / v) + math.log(t / math.sqrt(v + t * t)) - log_b)
    c, d = 1.0, 1 / (1 - (a + 0.5) * x / (a + 1))
    f = d
    for m in range(1, 10_000):
        even = m * (0.5 - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        for num in (even, -(a + m) * (a + 0.5 + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d, c = 1 / (1 + num * d), 1 + num / c
            f *= c * d
        if abs(c * d - 1) < 1e-16:
            break
    return front * f / a / 2


def interval(base: list, now: list, m: int) -> tuple:
    """ln r, the log of now over base by the centres of log times, and its simultaneous
    interval (Bonferroni over m rows), exponentiated: Welch's t with Welch-Satterthwaite's
    degrees of freedom on means, or from TRIMMED_FROM trials a side Yuen's on trimmed means,
    which one slow trial cannot move; (ln r, None, None) where a side has one trial or one
    at 0."""
    if min(len(base), len(now)) < 2 or min(base + now) <= 0:
        means = (statistics.fmean(base), statistics.fmean(now))
        ln_r = 0.0 if means == (0.0, 0.0) else ln(means[1]) - ln(means[0])
        return ln_r, None, None
    trim = TRIM if min(len(base), len(now)) >= TRIMMED_FROM else 0.0
    (c0, s0, h0), (c1, s1, h1) = (centre(sorted(map(math.log, side)), trim) for side in (base, now))
    ln_r = c1 - c0
    if not s0 + s1:  # no spread on either side: the point itself
        return ln_r, math.exp(ln_r), math.exp(ln_r)
    v = (s0 + s1) ** 2 / (s0**2 / (h0 - 1) + s1**2 / (h1 - 1))
    half = t_quantile(1 - ALPHA / 2 / m, v) * math.sqrt(s0 + s1)
    return ln_r, *(math.exp(min(700, max(-700, x))) for x in (ln_r - half, ln_r + half))


def centre(logs: list, trim: float) -> tuple:
    """A side's sorted log times as (trimmed mean, its squared standard error, the trials
    it keeps): Yuen's, the variance Winsorized (trim 0: the mean, variance / n, n)."""
    n, g = len(logs), int(trim * len(logs))
    kept = logs[g : n - g]
    winsorized = [kept[0]] * g + kept + [kept[-1]] * g
    h = len(kept)
    return statistics.fmean(kept), (n - 1) * statistics.variance(winsorized) / (h * (h - 1)), h


def name_method(trials: int) -> str:  # proton_diff's method, by the trials a side
    if trials == 1:
        return "one run"
    trimmed = trials >= TRIMMED_FROM
    return f"yuen {TRIM:.0%} trimmed log bonferroni" if trimmed else "welch log bonferroni"


def trials_to_settle(n: int, ratio: float, low: float, high: float, d: float) -> float:
    """About how many trials a side, of n now, would narrow an interval (by the square root
    of their number) off the edges a verdict is drawn at, +-d, the estimate staying."""
    ln_r, half = math.log(ratio), (math.log(high) - math.log(low)) / 2
    gap = max(d - abs(ln_r), abs(ln_r) - d)
    return n * (half / gap) ** 2 if gap > 0 else math.inf


def ln(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf
