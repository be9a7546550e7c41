"""The spawn form: every choice's share, budget and isolation, all of it HTML-escaped."""

from __future__ import annotations

import re

from traitlets.config import Config

HOSTILE_NAME = '<script>alert("x")</script>'


async def test_form_describes_every_choice_escaped(make_spawner) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "CPU", "slug": "cpu", "description": "<b>plain</b>"},
        {
            "display_name": HOSTILE_NAME,
            "slug": "shared",
            "profile_options": {
                "size": {
                    "display_name": "Size",
                    "choices": {
                        "eighth": {"display_name": "1/8 <i>GPU</i>", "gpu": {"fraction": "1/8"}},
                        "mig": {"display_name": "MIG", "gpu": {"backend": "mig", "mig_profile": "1g.10gb"}},
                        "hami": {"display_name": "HAMi", "gpu": {"fraction": 0.5, "backend": "hami"}},
                    },
                }
            },
        },
    ]
    config.FractionalSpawner.show_availability = False
    html = await make_spawner(config).render_options_form()
    assert HOSTILE_NAME not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "<b>plain</b>" not in html
    assert "1/8 &lt;i&gt;GPU&lt;/i&gt;" in html
    assert "0.125 GPU (time-slicing), 10 GiB GPU memory, not enforced (shared, soft caps only)" in html
    assert "1g.10gb MIG slice, 10 GiB GPU memory, hard limit (hardware partition)" in html
    assert "0.5 GPU (hami), 40 GiB GPU memory, enforced by HAMi" in html
    assert "CPU only, no GPU visible" in html
    # KubeSpawner's field names, so its form parsing keeps working.
    assert 'name="profile-option-shared--size"' in html
    assert re.search(r'<input type="radio" name="profile" value="cpu"\s+checked', html)
