module github.com/kisielk/gotool
