package vtotal

// PoisonFreed sets whether buffers going back to the layer's pool are
// filled with 0xEE (poisonFreed), for the simulation tests of package
// vtotal_test.
func PoisonFreed(on bool) { poisonFreed = on }
