"""What the host computes from a copy it took, sent back to the device in the same pass (VITS'
monotonic alignment search: ``neg_cent.cpu()``, a host buffer filled from it, ``torch.from_numpy(path)
.to(device)``): the second leg of TL102's copy, named in its message and related to it, not a finding
of its own (analysis/results_back.py; fixtures/rules/TL102/flagged_result_sent_back.py)."""

from __future__ import annotations

from pathlib import Path

from torchlint.config import from_table
from torchlint.engine import lint_source

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "TL102" / "flagged_result_sent_back.py"


def _copies(text: str) -> dict[int, object]:
    found = lint_source(text, "t.py", from_table({"select": ["TL102"], "min-impact": "low"}, Path(".")))
    return {f.line: f for f in found}


def test_the_buffer_filled_from_the_copy_and_uploaded_is_the_copy_s_second_leg() -> None:
    text = FIXTURE.read_text()
    copy = _copies(text)[22]
    assert "goes back to the device (`torch.from_numpy(path).to(device=device, dtype=dtype)`)" in copy.message
    assert 25 in [r.line for r in copy.related] and copy.impact == "medium"


def test_a_result_never_uploaded_and_a_buffer_no_copy_fills_keep_the_plain_words() -> None:
    copy = _copies(FIXTURE.read_text())[39]
    assert copy.message.endswith("copies a device value to the host and waits for it on every step")
    assert 43 not in [r.line for r in copy.related]


def test_a_host_function_s_new_array_made_from_the_copy_is_sent_back_too() -> None:
    text = FIXTURE.read_text().replace("        print(best_cost(scores))\n", "        order = best_cost(scores)\n        cost = cost + torch.from_numpy(order).cuda()\n")
    copy = _copies(text)[39]
    assert "goes back to the device (`torch.from_numpy(order).cuda()`)" in copy.message


def test_an_upload_in_another_pass_is_no_second_leg() -> None:
    text = (
        "import numpy as np\nimport torch\n\n\ndef train(model, loader, opt, search):\n"
        "    path = None\n"
        "    for x in loader:\n"
        "        if path is not None:\n            x = x + path\n"
        "        out = model(x.cuda())\n        out.sum().backward()\n        opt.step()\n"
        "        found = np.zeros(out.shape)\n        search(found, out.detach().cpu().numpy())\n"
        "    path = torch.from_numpy(found).cuda()\n"
    )
    copy = next(iter(_copies(text).values()))
    assert "goes back" not in copy.message
