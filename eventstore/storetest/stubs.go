package storetest

func (s suite) idempotencyTests() []subtest { return nil }
func (s suite) appendMultiTests() []subtest { return nil }
func (s suite) readTests() []subtest        { return nil }
func (s suite) headTests() []subtest        { return nil }
func (s suite) concurrencyTests() []subtest { return nil }
func (s suite) inputTests() []subtest       { return nil }
func (s suite) closeTests() []subtest       { return nil }
func (s suite) subscribeTests() []subtest   { return nil }
