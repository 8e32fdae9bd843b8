"""`kray share-workers`' bad input: a handler or poison type it cannot load says what to pass."""
import pytest

from cluster.cli import main
from cluster.tools.share_workers import load_handler, load_poison


def test_a_handler_is_loaded_from_module_and_function():
    module, handler = load_handler("json:dumps")
    assert module.__name__ == "json" and handler([1]) == "[1]"


@pytest.mark.parametrize("spec, says", [
    ("json", "use MODULE:FUNCTION"),
    ("no_such_module_here:f", "cannot import no_such_module_here"),
    ("json:no_such_function", "json has no no_such_function"),
])
def test_a_handler_that_cannot_be_loaded_says_what_to_pass(spec, says):
    with pytest.raises(ValueError, match=says):
        load_handler(spec)


def test_poison_types_are_builtin_names_or_module_names():
    assert load_poison("ValueError") is ValueError
    assert load_poison("json:JSONDecodeError").__name__ == "JSONDecodeError"
    with pytest.raises(ValueError, match="not an exception type"):
        load_poison("len")


def test_the_command_refuses_bad_input_before_starting_ray(capsys):
    assert main(["share-workers", "--group", "g", "--topic", "t", "--handler", "json:dumps",
                 "--poison", "NoSuchError"]) == 2
    assert "--poison 'NoSuchError' is not an exception type" in capsys.readouterr().err
    assert main(["share-workers", "--group", "g", "--topic", "t", "--handler", "json:dumps",
                 "--min-workers", "5", "--max-workers", "2"]) == 2
    assert "raise max_workers" in capsys.readouterr().err
