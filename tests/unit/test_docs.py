"""docs/options.md shows exactly the options registry."""

from pathlib import Path

from lakesink.options import REGISTRY
from lakesink.options.page import BEGIN, END, render_markdown

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


def test_every_option_the_docs_pass_in_code_is_one_lakesink_accepts():
    """`.option("k", ...)` and `options={"k": ...}` in any code block of README and docs/."""
    import re

    from lakesink import options as registry
    root = Path(__file__).parents[2]
    spellings = {s.lower() for o in REGISTRY.values() for s in (o.key, *o.aliases)}
    paimon = registry.paimon_option_keys()
    refused = getattr(registry, "REFUSED", {})
    spark_own = {"checkpointlocation", "path", "maxfilespertrigger"}  # Spark's file source's own options
    bad, seen = [], 0
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:python|bash)\n(.*?)```", page.read_text(), re.S):
            keys = re.findall(r'\.option\("([^"]+)"', block)
            for mapping in re.findall(r"options=\{([^}]*)\}", block):
                keys += re.findall(r'"([^"]+)"\s*:', mapping)
            seen += len(keys)
            for key in keys:
                if not (key.lower() in spellings or key in paimon or registry.is_storage_option(key)
                        or registry.is_field_option(key) or key.lower() in spark_own or key in refused
                        or key in registry.UNHONOURED):
                    bad.append(f"{page.name}: {key}")
    assert bad == [] and seen > 20, (bad, seen)
