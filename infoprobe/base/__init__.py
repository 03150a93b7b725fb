"""Infrastructure every room and the pillars share: output files written atomically under a
lock (atomic), the format markers --overwrite checks (markers), the header of every file
(header), JSON conversion (jsonable), the user-error base (errors), the allocator setting
of the command line (allocator). Imports nothing of the rest of the hub.
"""
