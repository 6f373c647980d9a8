"""predict's and advise's options, declared once (orchestrator/predict/options.py): the docs' table, the
parser and the predictions file's name come from the declaration. The refusals themselves, as the command
line prints them: test_predictor.py."""
from __future__ import annotations

import re

from orchestrator import cli
from orchestrator.predict import files, options
from tests.helpers import ROOT


def test_documented_options_table_equals_the_declaration():
    text = (ROOT / "docs" / "predictor.md").read_text()
    for marker, declared in (("predict-options", options.OPTIONS), ("predict-step-options", options.STEP_OPTIONS)):
        block = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", text, re.S)
        assert block, f"docs/predictor.md lacks the {marker} block"
        assert block.group(1) == options.markdown(declared), \
            "docs/predictor.md is stale: paste `python -m orchestrator.predict.options`"


def test_every_option_is_a_flag_of_its_commands_with_its_declared_default():
    parser = cli._parser()
    for command in ("predict", "advise"):
        args = parser.parse_args([command, "results", "--bandwidth", "1gbit", "--num_workers", "4"])
        values = options.values(args)
        expected = [o.param.name for o in options.OPTIONS if command == "advise" or not o.advise_only]
        assert list(values) == expected
        assert values == {**{name: options.option(name).param.default for name in expected},
                          "bandwidth": "1gbit", "num_workers": 4}


def test_the_predictions_file_is_named_by_the_options_in_their_order():
    values = {o.param.name: o.param.default for o in options.OPTIONS}
    one = {**values, "bandwidth": "25GBit", "num_workers": 16, "latency": "0.2MS", "overlap": False}
    assert files.predictions_path(ROOT, one) == ROOT / "predictions" / "25gbit_16w_0.2ms_overlap-false_x1.csv"
    hosts = {**one, "workers_per_host": 8, "compute_scale": 2.5}
    assert files.predictions_path(ROOT, hosts).name == "25gbit_2x8w_2400gbit-intra_0.2ms_overlap-false_x2.5.csv"
    # advise's limit does not change the table: predict and advise share its file
    assert files.predictions_path(ROOT, {**hosts, "max_accuracy_loss": 3.0}) == files.predictions_path(ROOT, hosts)
