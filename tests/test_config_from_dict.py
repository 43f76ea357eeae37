"""Every system config's ``from_dict`` (the Python API and what a run directory is read
through) refuses bad input one way (:func:`ldp_audit.config.config_from_dict`): a non-mapping,
a key that is no field, a missing required field and a value of the wrong type raise
InvalidParameterError naming the class, the key and the value; ``to_dict()`` reads back."""

from __future__ import annotations

import math

import pytest

from ldp_audit import systems
from ldp_audit.errors import InvalidParameterError

#: (system, a field whose value of the wrong type its class refuses, that value)
WRONG_TYPE = [
    ("pgc-a3c", "trials", "3"),
    ("pgc-a3c", "gravities", True),
    ("pgc-a3c-gym", "epsilon", [1.0]),
    ("dprl", "state_box", True),
    ("fedrl", "methods", 1),
    ("frd", "gravities", True),
    ("frd", "proxy_dims", "0123"),
    ("opacus", "canaries", 2.5),
    ("own-loop", "mechanism", "laplace"),
    ("own-loop", "params", [["lr", 0.1]]),
]
NAMES = sorted({name for name, _, _ in WRONG_TYPE})


def _tiny(name: str) -> dict:
    s = systems.get(name)
    tiny = s.tiny_config
    return s.config_from_dict(dict(tiny[0] if isinstance(tiny, tuple) else tiny)).to_dict()


def test_every_system_is_covered() -> None:
    assert set(NAMES) >= set(systems.names()) - set(systems.broken())


@pytest.mark.parametrize("name", NAMES)
def test_to_dict_reads_back_through_json(name: str) -> None:
    import json

    cls = systems.get(name).config_class
    d = _tiny(name)
    cfg = cls.from_dict(json.loads(json.dumps(d)))
    assert cfg.to_dict() == d and cfg == cls.from_dict(d)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [[("trials", 1)], "trials=1", None, 3])
def test_a_non_mapping_is_refused_naming_the_class(name: str, bad: object) -> None:
    cls = systems.get(name).config_class
    with pytest.raises(InvalidParameterError, match=f"{cls.__name__} must be read from a dict"):
        cls.from_dict(bad)


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_key_is_refused_naming_class_key_and_value(name: str) -> None:
    cls = systems.get(name).config_class
    d = {**_tiny(name), "nope": 12345}
    for read in (cls.from_dict, systems.get(name).config_from_dict):
        with pytest.raises(
            InvalidParameterError, match=f"{cls.__name__} has no field 'nope' .*12345"
        ):
            read(d)


@pytest.mark.parametrize(("name", "key", "value"), WRONG_TYPE)
def test_a_wrong_type_is_refused_naming_class_field_and_value(
    name: str, key: str, value: object
) -> None:
    cls = systems.get(name).config_class
    d = {**_tiny(name), key: value}
    for read in (cls.from_dict, systems.get(name).config_from_dict):
        with pytest.raises(InvalidParameterError) as err:
            read(d)
        msg = str(err.value)
        assert msg.startswith(cls.__name__) and key in msg and repr(value) in msg, msg


@pytest.mark.parametrize(("name", "key"), [("pgc-a3c-gym", "values"), ("own-loop", "system")])
def test_a_missing_required_field_is_refused_naming_it(name: str, key: str) -> None:
    cls = systems.get(name).config_class
    d = _tiny(name)
    del d[key]
    with pytest.raises(InvalidParameterError, match=f"{cls.__name__} needs the field '{key}'"):
        cls.from_dict(d)


def test_inf_reads_back_where_the_config_writes_it() -> None:
    """PGC-A3C writes epsilon inf as "inf"; an old FRD config.json wrote a non-private
    ldp_epsilon as "inf" (read as None); another field's "inf" is a wrong type, refused."""
    from ldp_audit.training.frd.config import FrdConfig
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    d = PgcA3cConfig(mechanism="none").to_dict()
    assert d["epsilon"] == "inf" and PgcA3cConfig.from_dict(d).epsilon == math.inf
    assert FrdConfig.from_dict({"ldp_epsilon": "inf"}).ldp_epsilon is None
    with pytest.raises(InvalidParameterError, match="PgcA3cConfig: clip .*'inf'"):
        PgcA3cConfig.from_dict({"clip": "inf"})
