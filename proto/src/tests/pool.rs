//! Many nodes: selection, eviction, the failure detector, the memory budget.
