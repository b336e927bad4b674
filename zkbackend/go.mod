module github.com/fencelock/fencelock/zkbackend

go 1.26.8

require github.com/fencelock/fencelock v0.0.0

require github.com/go-zookeeper/zk v1.0.4 // indirect

replace github.com/fencelock/fencelock => ../
