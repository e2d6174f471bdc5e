"""Gang scheduling (DESIGN §6): each scheduler's keys, and the group identity and size every member shares."""
