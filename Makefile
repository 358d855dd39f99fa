# Two commands do all set-up on a fresh machine:
#   make demo   install (venv, Python deps, WordNet 3.0) and run the main job on the embedded default
#   make test   install and run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out

.PHONY: install wordnet browser demo demo-side demo-main test docs lint clean

install: $(STAMP) wordnet

$(STAMP): pyproject.toml tools/requirements-lock.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c tools/requirements-lock.txt -e '.[dev,text,docs]'
	touch $(STAMP)

# WordNet 3.0 through the command researchers who pip-install run too (one code path): `imagenet-zsl
# setup` finds it (an nltk corpus, Debian's wordnet-base) or fetches it with nltk's downloader, then
# builds the noun-graph cache. As root with apt-get, Debian's wordnet-base is installed first when
# none is found (what CI does).
wordnet: $(STAMP)
	@$(BIN)/imagenet-zsl setup --no-download 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing WordNet 3.0 (Debian wordnet-base)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null; \
	  fi; \
	  $(BIN)/imagenet-zsl setup; }
	@echo "installed into $(VENV): in each new shell, 'source $(VENV)/bin/activate' puts imagenet-zsl on the PATH"

# configs/demo.yaml reads the factor splits from here (a fixed path, whatever OUT is)
FACTOR_SPLITS := out/factor-frequency
PRETRAINING   := in1k in12k in21k-p in22k

# Steps 1, 3 and 4 (the split builds, whose MILP solver uses one core, and the GBU protocol) run
# beside the others, their output kept in $(OUT)/demo-side.log and shown at the end: on 2 cores
# that saves about 1.5 minutes.
demo: install
	@mkdir -p $(OUT)
	@$(MAKE) --no-print-directory -j2 demo-side demo-main
	@cat $(OUT)/demo-side.log
	@echo "== files written"
	@for f in $(OUT)/splits/report.md $(OUT)/labels $(OUT)/splits-hascoet/report.md $(OUT)/attributes-demo \
	  $(FACTOR_SPLITS)/report.md $(OUT)/demo/summary.md $(OUT)/demo/summary.csv $(OUT)/demo/summary.tex \
	  $(OUT)/demo/hit_at_k.png $(OUT)/demo/cells $(OUT)/demo-factor/factor.md $(OUT)/demo-factor/factor.png \
	  $(OUT)/demo-ladder/ladder.md $(OUT)/demo-ladder/ladder.png; do echo "  $$f"; done

demo-side:
	@echo "== 1/8, 3/8 and 4/8 (split builds, the GBU protocol) run beside the other steps; their output follows at the end"
	@{ echo "== 1/8 ImageNet-21K splits on the real WordNet graph (configs/default.yaml)" && \
	  $(BIN)/imagenet-zsl splits build configs/default.yaml --out $(OUT)/splits --no-progress && \
	  echo "== 3/8 Hascoet-style benchmark with curated labels (configs/hascoet.yaml)" && \
	  $(BIN)/imagenet-zsl splits build configs/hascoet.yaml --out $(OUT)/splits-hascoet --no-progress && \
	  echo "== 4/8 GBU protocol on generated features with the real xlsa17 class structure" && \
	  $(BIN)/imagenet-zsl attributes demo --out $(OUT)/attributes-demo; \
	} > $(OUT)/demo-side.log 2>&1 || { cat $(OUT)/demo-side.log; exit 1; }

demo-main:
	@echo "== 2/8 label curation: GloVe class vectors, rare words, primary meanings"
	$(BIN)/imagenet-zsl labels build configs/labels.yaml --out $(OUT)/labels
	$(BIN)/imagenet-zsl labels sense cairn
	@echo "== 5/8 factor splits: label frequency moves, the other factors matched (3 bins x 30 classes)"
	$(BIN)/imagenet-zsl splits factor configs/default.yaml --factor frequency --bins 3 --size 30 --out $(FACTOR_SPLITS)
	@echo "== 6/8 the main job: imagenet-zsl run configs/demo.yaml (7 models x 5 splits + 3 factor splits, ZSL + GZSL, SIMULATED features)"
	$(BIN)/imagenet-zsl run configs/demo.yaml --out $(OUT)/demo --no-progress
	@echo "== 7/8 leakage: test classes of each committed split that were labels of a backbone's pretraining"
	@for set in $(PRETRAINING); do $(BIN)/imagenet-zsl splits leakage splits/*.txt --pretraining $$set || exit 1; done
	@echo "== 8/8 Hascoet's analyses of the run: hit@K against label frequency, the correction ladder"
	$(BIN)/imagenet-zsl analyze factor $(OUT)/demo --splits $(FACTOR_SPLITS) --out $(OUT)/demo-factor
	$(BIN)/imagenet-zsl analyze ladder $(OUT)/demo/cells/sgcn__hop2 --out $(OUT)/demo-ladder

# A headless browser for the test that looks at the built documentation site (tests/docs/): Debian's
# chromium, installed with apt-get as root like WordNet; elsewhere that one test says how to get it.
# Best effort: where the package has another name (Ubuntu's chromium-browser), the test decides.
browser:
	@if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (Debian) for the documentation test"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	      || echo "could not install chromium: tests/docs/test_site.py will say how to get it"; \
	  else \
	    echo "chromium missing: 'sudo apt-get install chromium' (tests/docs/test_site.py needs it)"; \
	  fi; \
	fi

test: install browser
	$(BIN)/pytest -q

# The documentation site: docs/ -> site/ (the reference pages are generated from the code by
# docs/hooks/reference.py); --strict makes a broken link or reference an error.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

lint: $(STAMP)
	$(BIN)/ruff check imagenet_zsl tests tools
	$(BIN)/ruff format --check imagenet_zsl tests tools

clean:
	rm -rf $(VENV) $(OUT) site .pytest_cache .ruff_cache
