"""``nvmlDeviceGetFieldValues``: several NVML fields in one driver call, each with its own answer.

The call itself succeeds while each field carries its own return code (``nvmlReturn``): one
field can be "not supported" while its neighbours answer. ``field_values`` hands back each
field's number or its error, unraised, so a reader decides which fields it needs; only "GPU is
lost" is raised at once, since it concerns the whole device. A field a driver does not know
(or a scope it does not take, as the all-links NVLink scope before it existed) answers "invalid
argument": for the collector that is "not supported" (asked no more), not a passing error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# scopeId for the NVLink throughput fields: the sum over all links (nvml.h).
ALL_LINKS = 0xFFFFFFFF
FieldId = int | tuple[int, int]  # a field id, or (field id, scope id: a link)
Answer = int | float | Exception

# valueType -> the member of the value union that holds it (nvml.h nvmlValueType_t).
_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
# nvmlReturn_t codes (nvml.h), for field answers and for the errors the readers raise.
_SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
_GPU_IS_LOST = 15


def field_values(nvml: Any, handle: Any, ids: Iterable[FieldId]) -> dict[FieldId, Answer]:
    """Each requested field id -> its value, or the NVMLError it answered (not raised)."""
    wanted = list(ids)
    answers: dict[FieldId, Answer] = {}
    for key, value in zip(wanted, nvml.nvmlDeviceGetFieldValues(handle, wanted), strict=True):
        code = int(value.nvmlReturn)
        if code == _GPU_IS_LOST:
            raise nvml.NVMLError(code)
        code = NOT_SUPPORTED if code == INVALID_ARGUMENT else code
        answers[key] = nvml.NVMLError(code) if code != _SUCCESS else _number(value)
    return answers


def _number(value: Any) -> int | float:
    member = _MEMBERS[value.valueType] if 0 <= value.valueType < len(_MEMBERS) else "ullVal"
    return getattr(value.value, member)


def need(answers: dict[FieldId, Answer], key: FieldId) -> int | float:
    """The field's value; its error raised when it did not answer."""
    answer = answers[key]
    if isinstance(answer, Exception):
        raise answer
    return answer


def sum_answered(answers: dict[FieldId, Answer], keys: Iterable[FieldId]) -> int:
    """The sum of the fields that answered; the first error raised when none did."""
    keys = list(keys)
    numbers = [answers[k] for k in keys if not isinstance(answers[k], Exception)]
    if not numbers:
        need(answers, keys[0])
    return int(sum(numbers))
