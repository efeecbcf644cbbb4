# The README's two commands. Both run scripts/setup (idempotent) first.
.PHONY: demo text-demo test test-fast fuzz build setup
demo:      ## main job: pack Fashion-MNIST, train the default recipe, print test accuracy
	scripts/demo
text-demo: ## text job: LoRA fine-tune pretrained MiniLM on Reuters grain, print accuracy vs majority class
	scripts/text_demo
test:      ## build and run every test
	scripts/test
test-fast: ## the quick iteration set (ctest -L fast)
	scripts/test -L fast
fuzz:      ## bounded libFuzzer runs of the parsers
	scripts/fuzz
build:
	scripts/build
setup:
	scripts/setup
