module github.com/go-redlock/redlock/tools/docstats

go 1.24
