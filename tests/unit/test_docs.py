"""docs/options.md shows exactly the options registry."""

from pathlib import Path

from lakesink.options import BEGIN, END, REGISTRY, render_markdown

PAGE = Path(__file__).parents[2] / "docs" / "options.md"


def test_the_options_page_is_generated_from_the_registry():
    text = PAGE.read_text()
    section = text[text.index(BEGIN):text.index(END) + len(END)]
    assert section == render_markdown(), "run: python -m lakesink.options docs/options.md"


def test_every_registered_option_is_on_the_options_page():
    text = PAGE.read_text()
    assert [key for key in REGISTRY if f"`{key}`" not in text] == []


def test_every_error_class_is_on_the_errors_page():
    import inspect

    from lakesink import errors
    page = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    classes = [name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, errors.LakesinkError)]
    assert [name for name in classes if f"`{name}`" not in page] == []
