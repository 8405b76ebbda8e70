module tfjob.local/pause

go 1.26
