package storetest

func (s suite) inputTests() []subtest { return nil }
func (s suite) closeTests() []subtest { return nil }
