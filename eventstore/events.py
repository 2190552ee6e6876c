"""The event catalog base: frozen, tagged msgspec Structs with stable tags.

Every event type subclasses :class:`Event` with an explicit tag that never changes
(``class PhaseStarted(Event, tag="mapipe.phase_started")``).  The tag is the stored ``type``.

Evolution rules (for every catalog):

* new fields get defaults and go last;
* a breaking change bumps the class variable ``schema_version`` and registers an upcaster
  ``upcast_v1_v2(data: dict) -> dict`` with :func:`register_upcaster`;
* stored events are decoded without ``forbid_unknown_fields`` so old readers tolerate new fields.

Example::

    class NoteAdded(Event, tag="demo.note_added"):
        text: str

    data = encode_event(NoteAdded(text="hi"))       # b'{"type":"demo.note_added","text":"hi"}'
    decode_event("demo.note_added", 1, data)        # NoteAdded(text='hi')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import msgspec

from eventstore.errors import InvalidEvent, UnknownEventType


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=False):
    """Base of every typed event.  Subclasses must pass an explicit ``tag``."""

    schema_version: ClassVar[int] = 1

    @classmethod
    def event_type(cls) -> str:
        tag = cls.__struct_config__.tag
        if not isinstance(tag, str):
            raise TypeError(f"{cls.__qualname__} has no explicit string tag")
        return tag


_ENCODER = msgspec.json.Encoder()
_registry: dict[str, type[Event]] = {}
_decoders: dict[type[Event], msgspec.json.Decoder[Any]] = {}
_upcasters: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


def _walk(cls: type[Event]) -> None:
    for sub in cls.__subclasses__():
        tag = sub.__struct_config__.tag
        if isinstance(tag, str):
            _registry.setdefault(tag, sub)
        _walk(sub)


def event_class(event_type: str) -> type[Event]:
    """The Struct class registered for ``event_type`` (imports every dialect on first miss)."""
    cls = _registry.get(event_type)
    if cls is None:
        _walk(Event)
        cls = _registry.get(event_type)
    if cls is None:
        from eventstore.dialects import _import_all  # registers the catalogs

        _import_all()
        _walk(Event)
        cls = _registry.get(event_type)
    if cls is None:
        raise UnknownEventType(f'Unknown event type "{event_type}"; no catalog defines it.')
    return cls


def known_event_types() -> list[str]:
    from eventstore.dialects import _import_all

    _import_all()
    _walk(Event)
    return sorted(_registry)


def register_upcaster(
    event_type: str, from_version: int
) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Callable[[dict[str, Any]], dict[str, Any]]]:
    """Register ``fn(data) -> data`` lifting ``event_type`` from ``from_version`` to +1."""

    def deco(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        _upcasters[(event_type, from_version)] = fn
        return fn

    return deco


def encode_event(event: Event) -> bytes:
    """Canonical JSON bytes of ``event`` (field order = declaration order)."""
    return _ENCODER.encode(event)


_Check = Callable[[Any], bool]
_round_trip_checks: dict[type[Event], list[tuple[str, _Check, bool]] | None] = {}


def _check_for(t: Any) -> _Check | None:
    """A test that a value of declared type ``t`` (a ``msgspec.inspect`` type) is stored and decoded
    back exactly (its own type, nothing coerced); None for a type not handled here."""
    import msgspec.inspect as mi

    if isinstance(t, mi.AnyType):
        return lambda v: True  # JSON values copied from a parsed document come back as they were
    if isinstance(t, mi.NoneType):
        return lambda v: v is None
    if isinstance(t, mi.BoolType):
        return lambda v: type(v) is bool
    constrained = any(getattr(t, a, None) is not None for a in
                      ("gt", "ge", "lt", "le", "multiple_of", "pattern", "min_length", "max_length"))
    if constrained:
        return None
    if isinstance(t, mi.IntType):
        return lambda v: type(v) is int  # of any size: msgspec writes and reads big integers exactly
    if isinstance(t, mi.FloatType):
        return lambda v: type(v) is float and v - v == 0.0  # an int would come back a float; NaN as null
    if isinstance(t, mi.StrType):
        return lambda v: type(v) is str
    if isinstance(t, mi.ListType):
        item = _check_for(t.item_type)
        return None if item is None else (lambda v: type(v) is list and all(map(item, v)))
    if isinstance(t, mi.DictType):
        key, value = _check_for(t.key_type), _check_for(t.value_type)
        if key is None or value is None:
            return None
        return lambda v: type(v) is dict and all(map(key, v)) and all(map(value, v.values()))
    if isinstance(t, mi.UnionType):
        checks = [_check_for(u) for u in t.types]
        if any(c is None for c in checks):
            return None
        return lambda v: any(c(v) for c in checks if c is not None)
    return None


def round_trips(event: Event) -> bool:
    """Whether ``event`` comes back from its stored bytes exactly, as ``decode_event(encode_event(event))``
    with every value of the same type (an int where the Struct declares a float would come back a
    float, a string where it declares an int would not decode).

    Decided from the Struct's declared field types, without encoding or decoding (a dialect asks
    this of each event it derives; ingest then encodes it once, to store it).  ``Any`` fields hold
    JSON values copied from a parsed document, which come back as they are.  A Struct with a type
    this check does not handle is tried the slow way, encoded and decoded."""
    import msgspec.inspect as mi

    cls = type(event)
    if cls not in _round_trip_checks:
        info = mi.type_info(cls)
        found: list[tuple[str, _Check, bool]] | None = [] if isinstance(info, mi.StructType) else None
        for f in info.fields if isinstance(info, mi.StructType) else ():
            check = _check_for(f.type)
            if check is None or found is None:
                found = None
                break
            # msgspec.inspect shows an UNSET default as "not required, no default"
            found.append((f.name, check, not f.required and f.default is msgspec.NODEFAULT
                          and f.default_factory is msgspec.NODEFAULT))
        _round_trip_checks[cls] = found
    checks = _round_trip_checks[cls]
    if checks is None:
        try:
            data = encode_event(event)
            return encode_event(decode_event(event.event_type(), cls.schema_version, data)) == data
        except Exception:  # noqa: BLE001 - InvalidEvent, EncodeError, OverflowError: it does not come back
            return False
    for name, check, unset_ok in checks:
        value = getattr(event, name)
        if value is msgspec.UNSET:  # left out of the bytes: comes back only as the field's default
            if not unset_ok:
                return False
        elif not check(value):
            return False
    return True


def decode_event(event_type: str, schema_version: int, data: bytes) -> Event:
    """Decode stored bytes into the typed Struct, upcasting old schema versions first."""
    if not data:  # the tombstone of a purged or erased payload (eventstore/erasure.py)
        from eventstore.errors import ContentErased

        raise ContentErased(f'The content of this "{event_type}" event was purged or erased; `evstore log` says '
                            "when and why.")
    cls = event_class(event_type)
    try:
        if schema_version < cls.schema_version:
            raw: dict[str, Any] = msgspec.json.decode(data)
            for v in range(schema_version, cls.schema_version):
                up = _upcasters.get((event_type, v))
                if up is None:
                    raise InvalidEvent(f'No upcaster for "{event_type}" v{v} -> v{v + 1}.')
                raw = up(raw)
            event: Event = msgspec.convert(raw, cls)
            return event
        dec = _decoders.get(cls)
        if dec is None:
            dec = _decoders[cls] = msgspec.json.Decoder(cls)
        decoded: Event = dec.decode(data)
        return decoded
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f'Stored "{event_type}" event does not match its Struct: {exc}') from exc
