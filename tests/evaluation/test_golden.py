"""Pins the bytes a run writes (metrics.json, per_class.csv, report.md, the top-k lists) on the toy
benchmark, so that a refactoring of the evaluation stage cannot change a result silently.

The paths of the temporary directory are replaced by ``<tmp>`` and metrics.json's ``software``
block (package versions) and the sha256 of the feature directories' manifests (the feature
stage's format) are left out; everything else must match the sha256 recorded when the
values were last checked by hand (tests/evaluation/test_run.py asserts the numbers themselves).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from tests.evaluation.evaluation_fixtures import one_hot, write_feature_dir

EXPECTED = {
    "metrics.json": "ca508e709529b2a3dea67647fb79a7951f7a8b1d8eab7dc5389b94ff2eb1431e",
    "per_class.csv": "837ba24dcc1a5dfe31d5ecd4f52c63a0e9c093bd05671dac643e337ab106c97a",
    "report.md": "1a2289e5b85182ff8cc2d316af0b650d144b8db81ca4ed218c00241b84ddcd84",
    "topk/classes.json": "311374413531316eaaada7bdac49e4359c10f2de805013af46ec6b3053d87964",
    "topk/seen.labels.npy": "5a586cf213c55fdcbd8c4015629886bcf96d6fdac8189eabacf498b5929c6922",
    "topk/seen.rows.npy": "a07a32cc3d591440b62745afe80564ec59edc7856bbda06e1fb60db5f8c1be1e",
    "topk/seen.seen.ids.npy": "f86822d21ed0868e2249fa8a182466a6b990c6aea39aa57780145dc7e3ec52f0",
    "topk/seen.seen.scores.npy": "949e3d44b57a08a485bb5b6666e2ed3290d35f8bb302634c32c644a12a192994",
    "topk/seen.seen.tail.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/seen.true_above.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/seen.true_tied.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/seen.unseen.ids.npy": "c425385c8748057499f112fb42e9745f314fb386dd8003583cf4d18e238fb318",
    "topk/seen.unseen.scores.npy": "f1522e9649ef3f7d17bf339e106a98ffdb0c731f48a0af05f587efb27c093baa",
    "topk/seen.unseen.tail.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/seen.val_unseen.ids.npy": "a14833e1866e17fa273fb9ddde73c468a0a760c9d6f0968dba6c87c2e0d800a5",
    "topk/seen.val_unseen.scores.npy": "cee70ce9b140927fe1e3b030802831979075d76f6342b08e9598adab1039374e",
    "topk/seen.val_unseen.tail.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/test.labels.npy": "aa14222883eb0b950c81d44c7a8262d27bceb5c8696e7b2ea8d5cabbf1a650f8",
    "topk/test.rows.npy": "79ad36e458714e7a4c60fb05198f3c0ed1af68bc8588ffd66d270be209a2e504",
    "topk/test.seen.ids.npy": "f70496196c13a513616977d538302188f75937229aa1e1135158e66717f1df3f",
    "topk/test.seen.scores.npy": "9a6160e4c3e4ed744191aaf1dd94bdf500c974d3ea3392b0b3b26739a813de7e",
    "topk/test.seen.tail.npy": "f99aa1837fa314ccdfee24d1d805156c476aa1306feea35575e8dffd75838ef0",
    "topk/test.true_above.npy": "f0dcc3e2fcc582e1f7fa6932e031633716c109d2c9d9c833c360a9f451693728",
    "topk/test.true_tied.npy": "5603cd0146a9ae5a4225bd7733637bb745398e14fe48ed72ee3a55e7a9d137fd",
    "topk/test.unseen.ids.npy": "8f7c10364f3696f47783c816fa7c201cc94d91a0ab264e51cb82d1a05e2a730f",
    "topk/test.unseen.scores.npy": "61d953a7236a764a2bee0b230bee48521b883b899e691f44b4ad8abee315329c",
    "topk/test.unseen.tail.npy": "f99aa1837fa314ccdfee24d1d805156c476aa1306feea35575e8dffd75838ef0",
    "topk/val.labels.npy": "527b77d6f7826e34d95566abd2b064a204ae3d0e4bdd933620b4777f4fc074c3",
    "topk/val.rows.npy": "6165bbbb719e2ba5475a45360d32bcb128a06ffff4a996038b44c0dc5d6433cb",
    "topk/val.seen.ids.npy": "bcc094ca9b21ab17f5d5e5920bda59813b6fefe5380f1a7c854491ab3aca5fb5",
    "topk/val.seen.scores.npy": "abcb2b39e69e697cd21758b628b2ba5edf2cfb9cc4b78e5342b4a363bbcabfc6",
    "topk/val.seen.tail.npy": "2cbc6937e6d49834d1bd2be7b06fc1ad4d472897f4e881ed05b1998a731417f2",
    "topk/val.true_above.npy": "2cbc6937e6d49834d1bd2be7b06fc1ad4d472897f4e881ed05b1998a731417f2",
    "topk/val.true_tied.npy": "2cbc6937e6d49834d1bd2be7b06fc1ad4d472897f4e881ed05b1998a731417f2",
    "topk/val.val_unseen.ids.npy": "7c529acda0abc68497896305e1766282d2d626cdfb8b73d64f66b1e6e1514854",
    "topk/val.val_unseen.scores.npy": "821b6abbdd77237bf779a0bbcf920a30cad6f29250ebf408b0fbff39f090f471",
    "topk/val.val_unseen.tail.npy": "2cbc6937e6d49834d1bd2be7b06fc1ad4d472897f4e881ed05b1998a731417f2",
    "topk/val_seen.labels.npy": "a3f91a8ba035d0ed2b99b415f855d8a7ccb9c0eba7045c5324f9409905c45008",
    "topk/val_seen.rows.npy": "f9903acaeea88e7642e9820968f19d2c30dabf7aeb913e939bc23dc2f27be854",
    "topk/val_seen.seen.ids.npy": "6fe1d0fea70dbce01f0fa0a5169bce5da6710ff52c9ffc13fa90ff46c8f9d2d5",
    "topk/val_seen.seen.scores.npy": "949e3d44b57a08a485bb5b6666e2ed3290d35f8bb302634c32c644a12a192994",
    "topk/val_seen.seen.tail.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/val_seen.true_above.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/val_seen.true_tied.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/val_seen.unseen.ids.npy": "c425385c8748057499f112fb42e9745f314fb386dd8003583cf4d18e238fb318",
    "topk/val_seen.unseen.scores.npy": "f1522e9649ef3f7d17bf339e106a98ffdb0c731f48a0af05f587efb27c093baa",
    "topk/val_seen.unseen.tail.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
    "topk/val_seen.val_unseen.ids.npy": "a14833e1866e17fa273fb9ddde73c468a0a760c9d6f0968dba6c87c2e0d800a5",
    "topk/val_seen.val_unseen.scores.npy": "cee70ce9b140927fe1e3b030802831979075d76f6342b08e9598adab1039374e",
    "topk/val_seen.val_unseen.tail.npy": "1eeec9786e6f14468051d05b8e77f97b6319fc4d6e23fa4c7100381e725ad4a4",
}


def _digest(path, tmp_path) -> str:
    data = path.read_bytes().replace(str(tmp_path).encode(), b"<tmp>")
    if path.name == "metrics.json":
        metrics = json.loads(data)
        metrics.pop("software")
        for record in metrics["inputs"].values():  # the feature stage's manifest bytes
            if isinstance(record, dict):
                record.pop("manifest_sha256", None)
        data = json.dumps(metrics, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def test_run_outputs_keep_their_bytes(bench, graph, tmp_path):
    val_rows = np.repeat([6, 7], 2)
    test_labels = np.repeat(np.arange(6), 3)
    test_features = one_hot(test_labels)
    test_features[0] = one_hot(np.array([1]))[0]
    features = write_feature_dir(
        tmp_path / "f2",
        np.r_[test_labels, val_rows],
        np.vstack([test_features, one_hot(val_rows) + 1.5 * one_hot(np.array([8]))]),
    )
    out = tmp_path / "run"
    cfg = EvaluationConfig(
        features=features,
        split=bench["split"],
        out=out,
        prototypes=bench["protos"],
        ks=[1, 2, 5],
        label_frequency=False,
        plots=False,
        gzsl=True,
        seen_features=bench["seen"],
        val_split=bench["val"],
        count_as_miss=["n00000005"],
    )
    evaluate(cfg, graph=graph, progress=False)
    names = ["metrics.json", "per_class.csv", "report.md"]
    names += sorted(str(p.relative_to(out)) for p in (out / "topk").iterdir())
    got = {name: _digest(out / name, tmp_path) for name in names}
    # the report names how γ was chosen and quotes the test figures of that averaging
    calibration = json.loads((out / "metrics.json").read_text())["gzsl"]["calibration"]
    flat = calibration["test"]["flat"]["1"]
    line = next(
        t for t in (out / "report.md").read_text().splitlines() if t.startswith("Calibrated stacking")
    )
    assert "maximise flat (per-image) H@1" in line and f"**H {100 * flat['H']:.2f}" in line
    assert got == EXPECTED
