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


def decode_event(event_type: str, schema_version: int, data: bytes) -> Event:
    """Decode stored bytes into the typed Struct, upcasting old schema versions first."""
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
