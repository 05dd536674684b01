package domain

// placement is where a live execution is: its key queue, and its index in
// that queue's waiting items, or -1 once it is granted.
type placement struct {
	kq *KeyQueue
	i  int
}

// locator finds where a live execution is (Queues' where). The waiting ones,
// of which there may be millions, are in an Index, whose entries are only
// placements (an entry's key is the id in the slot it points to); the
// granted ones, as many as the slots, in a map.
type locator struct {
	waiting Index[KeyQueue, waitKeys]
	granted map[string]*KeyQueue
}

func newLocator(waiting int) *locator {
	l := &locator{granted: map[string]*KeyQueue{}}
	l.waiting.Reserve(waiting)
	return l
}

// get returns where execution id is.
func (l *locator) get(id string) (placement, bool) {
	if kq, i := l.waiting.Lookup(id); kq != nil {
		return placement{kq: kq, i: i}, true
	}
	if kq, ok := l.granted[id]; ok {
		return placement{kq: kq, i: -1}, true
	}
	return placement{}, false
}

// wait records that id waits at kq.waiting.items[i], which must hold it.
func (l *locator) wait(id string, kq *KeyQueue, i int) {
	delete(l.granted, id)
	l.waiting.Put(id, kq, i)
}

// grant records that id holds a slot of kq. Call it before the waiter's
// slot is cleared: the waiting entry is found through it.
func (l *locator) grant(id string, kq *KeyQueue) {
	l.waiting.Remove(id)
	l.granted[id] = kq
}

// remove forgets id. Call it before the waiter's slot is cleared.
func (l *locator) remove(id string) {
	l.waiting.Remove(id)
	delete(l.granted, id)
}

// waitKeys gives the key of a waiting entry: the id in the slot it points to.
type waitKeys struct{}

func (waitKeys) Key(kq *KeyQueue, i int32) string { return kq.waiting.items[i].id }
