"""The upload form's shape traffic in a real browser (issue 43): JSON Lines pasted into the field are sent as text
by the page's script and aggregated by the API; a bad line is shown at the field, nothing submitted."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_bad_traffic_line_is_shown_at_its_field(page, live_service, tmp_path):
    model = tmp_path / "m.pt2"
    model.write_bytes(b"never read: the context is refused first")
    page.goto(live_service.url + "/upload")
    page.get_by_label("Model file").set_input_files(str(model))
    field = page.locator('textarea[name="ctx.shape_traffic"]')
    expect(field).to_have_attribute("data-kind", "jsonl")
    field.fill('{"ids": [1, 61]}\n{"ids": [1, 0], "count": 2}')
    page.get_by_role("button", name="Analyse").click()
    error = page.locator('[data-error-for="shape_traffic"]')
    expect(error).to_contain_text("line 2: ids: every size must be an integer from 1")
    assert "/analyses/" not in page.url
