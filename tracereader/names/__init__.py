"""What a name or an event field says, before any trace is read: kernel classes and decoded
kernel names (`kernel_names`), torch's op names (`op_names`), a kernel's footprint and
occupancy (`footprint`), the datasheet peaks of known devices (`devices`)."""
