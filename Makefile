# Two commands do all set-up on a fresh machine:
#   make demo   install (venv, Python deps, WordNet 3.0) and run the main job on the embedded default
#   make test   install and run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out

.PHONY: install wordnet demo test lint clean

install: $(STAMP) wordnet

$(STAMP): pyproject.toml tools/requirements-lock.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c tools/requirements-lock.txt -e '.[dev,text]'
	touch $(STAMP)

# WordNet 3.0: an nltk corpus if one is installed, else Debian's wordnet-base (apt-get as root).
wordnet: $(STAMP)
	@if ! $(BIN)/python -c "from imagenet_zsl.hierarchy.wordnet import locate_wordnet; locate_wordnet()" 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing WordNet 3.0 (Debian wordnet-base)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null; \
	  else \
	    echo "WordNet 3.0 missing: run 'sudo apt-get install wordnet-base' or '$(BIN)/python -m nltk.downloader wordnet'"; exit 1; \
	  fi; \
	fi
	@$(BIN)/python -c "from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns as l; n=l(); print(f'WordNet 3.0 ready: {len(n.wnids):,} noun synsets')"

demo: install
	@echo "== 1/5 ImageNet-21K splits on the real WordNet graph (configs/default.yaml)"
	$(BIN)/imagenet-zsl splits build configs/default.yaml --out $(OUT)/splits --no-progress
	@echo "== 2/5 label curation: GloVe class vectors, rare words, primary meanings"
	$(BIN)/imagenet-zsl labels build configs/labels.yaml --out $(OUT)/labels
	$(BIN)/imagenet-zsl labels sense cairn
	@echo "== 3/5 Hascoet-style benchmark with curated labels (configs/hascoet.yaml)"
	$(BIN)/imagenet-zsl splits build configs/hascoet.yaml --out $(OUT)/splits-hascoet --no-progress
	@echo "== 4/5 GBU protocol on generated features with the real xlsa17 class structure"
	$(BIN)/imagenet-zsl attributes demo --out $(OUT)/attributes-demo
	@echo "== 5/5 the main job: imagenet-zsl run configs/demo.yaml (6 models x 4 splits, ZSL + GZSL, SIMULATED features)"
	$(BIN)/imagenet-zsl run configs/demo.yaml --out $(OUT)/demo --no-progress

test: install
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check imagenet_zsl tests tools
	$(BIN)/ruff format --check imagenet_zsl tests tools

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .ruff_cache
