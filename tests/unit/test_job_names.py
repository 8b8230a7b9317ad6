import pytest

from streamfill.names import validate_job_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["orders-stream", "orders.backfill_2026", "A1"])
def test_allowed_job_names(name):
    assert validate_job_name(name) == name


@pytest.mark.parametrize("name", ["", "orders stream", "x;drop table jobs", "a/b", "é", "x" * 201])
def test_job_names_outside_the_allowed_characters_are_refused_with_the_rule(name):
    with pytest.raises(ValueError, match="letters, digits"):
        validate_job_name(name)
