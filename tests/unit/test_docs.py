"""Every lakesink option is documented in docs/options.md."""

from pathlib import Path

from lakesink.options import LAKESINK_OPTIONS


def test_every_lakesink_option_is_in_the_options_page():
    page = (Path(__file__).parents[2] / "docs" / "options.md").read_text()
    missing = [key for key in LAKESINK_OPTIONS if f"`{key}`" not in page]
    assert missing == []
