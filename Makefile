# Shortcuts for the commands the README gives; each is a script that works without make.
.PHONY: demo test safety bench

demo:
	go run ./cmd/fencelock demo

test:
	./scripts/test

safety:
	./scripts/safety

bench:
	go run ./bench -write-docs
