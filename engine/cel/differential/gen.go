package main

func generate() *Corpus { return &Corpus{Variables: []string{"object"}} }
