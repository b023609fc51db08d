module github.com/go-redlock/redlock/tools/depgraph

go 1.24.0
