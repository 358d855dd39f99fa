"""``validate`` checks the pipeline ``extract`` runs (review of issues #44-#47, item 6): both build
their extraction's pipeline from one definition of the flags (``features.cli.pipeline_flags``,
each setting the config field of its name, read back by ``extract_config``), so a non-default
extraction (``--decode``, ``--precision``, ``--fast``, ``--ten-crop``, ``--compile`` ...) is
validated as it extracts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from imagenet_zsl.cli import build_parser, handler_config
from imagenet_zsl.features import commands, validate
from imagenet_zsl.features.extract_setup import PIPELINE_FIELDS

#: every pipeline flag away from its default
PIPELINE = ["--decode", "torchvision", "--jpeg-draft", "--fast", "--precision", "bf16", "--compile"]
PIPELINE += ["--resize", "72", "--crop", "64", "--ten-crop", "--batch-size", "4", "--device", "cpu"]
PIPELINE += ["--workers", "0"]
#: what else both share
COMMON = ["--store", "S", "--backbone", "tiny-test", "--weights", "w.pth", "--per-class", "3", "--seed", "5"]
COMMON += ["--layout", "flat", "--val-labels", "labels.txt", "--allow-incomplete", "--no-progress"]


def test_validate_builds_the_extraction_extract_builds_for_the_same_flags(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(commands, "run_extraction", built.append)
    monkeypatch.setattr(commands, "tune_process_for_image_pipeline", lambda: None)
    extract = ["extract", *COMMON, *PIPELINE, "--classes", "c.txt", "--out", str(tmp_path / "f")]
    args = build_parser().parse_args(extract)
    assert commands.extract(handler_config(commands.extract, args)) == 0
    (extracted,) = built
    args = build_parser().parse_args(["validate", *COMMON, *PIPELINE])
    options = handler_config(validate.validate, args)
    validated = validate._extract_config(options, "S", Path("c.txt"), tmp_path / "f")
    # the same extraction but for what validate needs: the head's logits
    assert validated == dataclasses.replace(extracted, logits=True)
    defaults = {f.name: f.default for f in dataclasses.fields(validated)}
    changed = {name for name in PIPELINE_FIELDS if getattr(validated, name) != defaults[name]}
    assert changed == set(PIPELINE_FIELDS)  # each flag reached the config, none left at its default
