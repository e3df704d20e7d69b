"""The verifier's reward contract: what tests/test.sh leaves in /logs/verifier, read as Harbor does.

``reward.json`` (a flat object of finite numbers) wins over ``reward.txt`` (one number); an invalid
``reward.json`` does not fall back. A missing, empty or unparsable reward is an error, never 0.0.
Whatever the files hold (any bytes, any nesting, any number), parsing answers; it never raises.
"""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

VERIFIER_DIR = "/logs/verifier"
REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
REWARD_DETAILS = "reward-details.json"
REWARD_FILES = (REWARD_JSON, REWARD_TXT, REWARD_DETAILS)
MAX_DETAILS_DEPTH = 64  # deeper reward details are passed on as text: they must serialise again
_SHORT = reprlib.Repr()  # bounded depth and length, whatever a file nests
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 60, 60, 60


class Failure(StrEnum):
    """Why a grading (or an episode) has no reward, as a kind: the recorder names each as
    Harbor's exception of that kind, never by reading the message."""

    NO_REWARD = "no_reward"  # neither reward file exists (or no step has a result)
    EMPTY = "empty"  # a reward file is empty
    INVALID = "invalid"  # a reward file does not parse, or names no scalar reward
    TIMEOUT = "timeout"  # the verifier ran out of time
    EPISODE = "episode"  # the episode's own failure: a stop, the disk guard, a failed action


@dataclass(frozen=True)
class Reward:
    """The scalar reward (None when there is none), every metric, why it is missing (``error``,
    of kind ``failure``)."""

    value: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    details: Any = None
    failure: Failure | None = None


def reward_rule(text: str) -> tuple[str, ...]:
    """The keys a reward rule names: ``KEY`` (that metric is the reward) or ``mean:K1,K2,...``
    (their mean); ValueError says what is wrong."""
    rule = text.strip()
    if rule.startswith("mean:"):
        keys = tuple(key.strip() for key in rule[len("mean:") :].split(","))
        if not all(keys) or len(set(keys)) != len(keys):
            raise ValueError(f"{text!r}: mean: needs distinct metric names, comma separated")
        return keys
    if not rule or "," in rule:
        raise ValueError(f"{text!r}: give one metric name, or mean:K1,K2 for their mean")
    return (rule,)


def parse_reward(files: dict[str, bytes], rule: str | None = None) -> Reward:
    """Read the reward from the verifier's output files, keyed by file name; ``rule`` (the
    server's ``reward_key``, see :func:`scalar`) picks the scalar among several metrics."""
    details = _details(files.get(REWARD_DETAILS))
    if REWARD_JSON in files:
        metrics, error, failure = _parse_json(files[REWARD_JSON])
    elif REWARD_TXT in files:
        metrics, error, failure = _parse_txt(files[REWARD_TXT])
    else:
        error = (
            f"the verifier wrote no reward: neither {VERIFIER_DIR}/{REWARD_JSON}"
            f" nor {VERIFIER_DIR}/{REWARD_TXT} exists"
        )
        metrics, failure = {}, Failure.NO_REWARD
    if error:
        return Reward(None, {}, error, details, failure)
    value, error = scalar(metrics, rule)
    return Reward(value, metrics, error, details, None if error is None else Failure.INVALID)


def scalar(metrics: dict[str, float], rule: str | None = None) -> tuple[float | None, str | None]:
    """The episode reward: what ``rule`` names (a metric, or ``mean:K1,K2``: the mean of those)
    when the metrics hold every key it names; else the ``reward`` key, else the only key."""
    keys = reward_rule(rule) if rule else ()
    if keys and all(key in metrics for key in keys):
        return math.fsum(metrics[key] for key in keys) / len(keys), None
    if "reward" in metrics:
        return metrics["reward"], None
    if len(metrics) == 1:
        return next(iter(metrics.values())), None
    named = f" nor every key HARBOR_OPENENV_REWARD_KEY={rule!r} names" if rule else ""
    return None, (
        f"{REWARD_JSON} has several metrics ({', '.join(sorted(metrics))}) and no 'reward' key"
        f"{named}, so there is no scalar reward (HARBOR_OPENENV_REWARD_KEY names the key that"
        " is, or mean:K1,K2)"
    )


_Parsed = tuple[dict[str, float], str | None, Failure | None]


def _parse_json(raw: bytes) -> _Parsed:
    where = f"{VERIFIER_DIR}/{REWARD_JSON}"
    if not raw.strip():
        return {}, f"{where} is empty", Failure.EMPTY
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return {}, f"{where} is not valid JSON: {_short(exc)}", Failure.INVALID
    if not isinstance(data, dict) or not data:
        return (
            {},
            f"{where} must be a non-empty flat object of numbers, got {_short(data)}",
            Failure.INVALID,
        )
    metrics = {}
    for key, value in data.items():
        if isinstance(value, bool):
            value = int(value)
        try:
            number = float(value) if isinstance(value, int | float) else math.nan
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            return (
                {},
                f"{where}: {_short(key)} must be a finite number, got {_short(value)}",
                Failure.INVALID,
            )
        metrics[key] = number
    return metrics, None, None


def _parse_txt(raw: bytes) -> _Parsed:
    where = f"{VERIFIER_DIR}/{REWARD_TXT}"
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return {}, f"{where} is empty", Failure.EMPTY
    try:
        value = float(text)
    except ValueError:
        return {}, f"{where} must hold one number, got {_short(text)}", Failure.INVALID
    if not math.isfinite(value):
        return {}, f"{where} must hold a finite number, got {text}", Failure.INVALID
    return {"reward": value}, None, None


def _details(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        details = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        details = None
    else:
        if _depth_at_most(details, MAX_DETAILS_DEPTH):
            return details
    return {"unparsed": raw[:4096].decode("utf-8", errors="replace")}


def _depth_at_most(value: Any, limit: int) -> bool:
    """Whether ``value``'s lists and objects nest at most ``limit`` deep (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _short(value: Any) -> str:
    text = _SHORT.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
