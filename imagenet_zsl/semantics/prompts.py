"""What a text encoder reads for each class (``labels encode``): templates, named template sets,
and per-class prompt files, as vision-language zero-shot classifiers are built in the field.

* ``--template T`` (repeatable): templates with ``{}`` for the class name (WordNet lemmas);
* ``--templates NAME``: a named set shipped by open_clip (``open_clip.zero_shot_metadata``):
  ``openai-imagenet`` (the 80 templates of CLIP's ImageNet classifier) or ``simple-imagenet``
  (its 7-template subset);
* ``--prompts FILE``: CuPL-style descriptions, a JSON object ``{wnid: [prompt, ...]}`` whose prompts
  are encoded as they are. A class of the class list that the file does not hold is an error
  (``--missing-prompts error``, the default: never a silently different classifier) or gets the
  template texts (``--missing-prompts templates``); how many did is recorded.

Every text is encoded and L2-normalised, a class's texts are averaged and the mean normalised
again (``semantics.encode``), as open_clip's ``build_zero_shot_classifier`` does. The choice is
recorded in the class vectors' ``source`` (set name and size; the prompt file's sha256), which
``train`` copies into the model manifest (``semantics_identity``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.paths import regular_input_file

DEFAULT_TEMPLATES = ("a photo of a {}.",)
PLACEHOLDER = "{}"
#: ``--templates NAME`` → the ``open_clip.zero_shot_metadata`` list it names
TEMPLATE_SETS = {
    "openai-imagenet": "OPENAI_IMAGENET_TEMPLATES",
    "simple-imagenet": "SIMPLE_IMAGENET_TEMPLATES",
}
MISSING_POLICIES = ("error", "templates")
_WNID = re.compile(r"n[0-9]{8}")


def default_template_help() -> str:
    """The default template as ``labels encode --template`` help quotes it (a lazy help target)."""
    return repr(DEFAULT_TEMPLATES[0])


@dataclass(frozen=True)
class PromptSet:
    """The texts of every class: ``templates`` × lemmas, or a class's own ``per_class`` prompts.

    ``name``: the template set's name (None for ``--template``); ``per_class``: wnid → prompts;
    ``per_class_label``: how the prompt file is recorded; ``missing``: what a class without its
    own prompts gets (``error`` or ``templates``)."""

    templates: tuple[str, ...] = DEFAULT_TEMPLATES
    name: str | None = None
    per_class: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    per_class_label: str | None = None
    missing: str = "error"

    def check_covers(self, wnids: Sequence[str]) -> list[str]:
        """The wnids that fall back to the templates; an error naming them when ``missing`` is
        ``error`` (before a model is loaded)."""
        if self.per_class_label is None:
            return []
        absent = [w for w in wnids if w not in self.per_class]
        if absent and self.missing == "error":
            raise UserInputError(
                f"--prompts {self.per_class_label}: {len(absent)} of {len(wnids)} classes have no "
                f"prompts: {preview(absent)}; add them, or pass --missing-prompts templates to give "
                "them the template texts"
            )
        return absent

    def describe(self, wnids: Sequence[str]) -> str:
        """For the class vectors' ``source``: the templates (or the set's name and size) and the
        prompt file with how many classes fell back to the templates."""
        if self.name is not None:
            text = f"templates {self.name} ({len(self.templates)} templates, open_clip)"
        else:
            text = f"templates {list(self.templates)}"
        if self.per_class_label is not None:
            fallback = len(self.check_covers(wnids))
            text += f"; per-class prompts {self.per_class_label}, {fallback} classes from the templates"
        return text


def check_templates(templates: Sequence[str]) -> list[str]:
    """Templates as a list; each must hold ``{}`` exactly once (else a one-line error naming it)."""
    templates = list(templates) or list(DEFAULT_TEMPLATES)
    for template in templates:
        if template.count(PLACEHOLDER) != 1:
            raise UserInputError(
                f"--template {template!r}: must contain '{{}}' exactly once (where the class name goes)"
            )
    if len(set(templates)) != len(templates):
        raise UserInputError(f"--template: a template is given twice: {preview(templates)}")
    return templates


def named_templates(name: str) -> tuple[str, ...]:
    """The templates of a named set from ``open_clip.zero_shot_metadata`` (callables there, turned
    into ``{}`` strings here)."""
    if name not in TEMPLATE_SETS:
        raise UserInputError(
            f"--templates {name!r}: unknown template set; choose one of {', '.join(TEMPLATE_SETS)}"
        )
    try:
        from open_clip import zero_shot_metadata  # deferred: an optional extra, only for --templates
    except ImportError:
        raise UserInputError(
            f"--templates {name}: the template sets come from open_clip: `pip install open_clip_torch`"
        ) from None
    templates = tuple(
        t(PLACEHOLDER) if callable(t) else str(t) for t in getattr(zero_shot_metadata, TEMPLATE_SETS[name])
    )
    return tuple(check_templates(templates))


class _DuplicateKey(ValueError):
    """A key given twice in one JSON object (json keeps the last silently)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook``: a JSON object as a dict, refusing a key it holds twice."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return data


def read_prompt_file(path: str | Path) -> dict[str, tuple[str, ...]]:
    """A CuPL-style prompt file: JSON ``{wnid: [prompt, ...]}``; one-line errors for bad JSON, a key
    given twice (json would keep the last one silently), a key that is not a wnid, a value that is
    not a non-empty list of non-empty strings."""
    path = regular_input_file(path, "prompt file (JSON: wnid → list of prompts)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        raise UserInputError(f"{path}: not UTF-8 text; --prompts takes a JSON file") from None
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}: not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except _DuplicateKey as err:
        raise UserInputError(
            f"{path}: key {err.args[0]!r:.80} is given twice; give each class its prompts once"
        ) from None
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise UserInputError(f"{path}: not a prompt file {{wnid: [prompt, ...]}} ({err})") from None
    except RecursionError:  # json builds nested values recursively
        raise UserInputError(f"{path}: nested too deeply for a prompt file {{wnid: [prompt, ...]}}") from None
    if not isinstance(data, dict):
        raise UserInputError(
            f"{path}: expected a JSON object {{wnid: [prompt, ...]}}, got {type(data).__name__}"
        )
    prompts = {}
    for key, value in data.items():
        if not _WNID.fullmatch(key):
            raise UserInputError(
                f"{path}: key {key!r:.80} is not a wnid (n + 8 digits); prompts are keyed by wnid"
            )
        ok = isinstance(value, list) and value and all(isinstance(p, str) and p.strip() for p in value)
        if not ok:
            raise UserInputError(f"{path}: {key}: expected a non-empty list of non-empty prompt strings")
        if len(set(value)) != len(value):
            raise UserInputError(f"{path}: {key}: a prompt is given twice")
        prompts[key] = tuple(value)
    return prompts


def prompt_set(
    templates: Sequence[str] | None = None,
    name: str | None = None,
    prompts: str | Path | None = None,
    missing: str = "error",
) -> PromptSet:
    """The :class:`PromptSet` of the command-line choices (``--template``, ``--templates``,
    ``--prompts``, ``--missing-prompts``); ``--template`` and ``--templates`` exclude each other."""
    if templates and name:
        raise UserInputError("--template and --templates: give one (your own templates or a named set)")
    if missing not in MISSING_POLICIES:
        raise UserInputError(f"--missing-prompts {missing!r}: choose one of {', '.join(MISSING_POLICIES)}")
    chosen = named_templates(name) if name else tuple(check_templates(templates or DEFAULT_TEMPLATES))
    if prompts is None:
        return PromptSet(chosen, name)
    per_class = read_prompt_file(prompts)
    label = f"{Path(prompts).name} (sha256 {sha256_file(prompts)})"
    return PromptSet(chosen, name, per_class, label, missing)
