module github.com/kisielk/errcheck
