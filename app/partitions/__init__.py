"""Time partitions: the tables that grow with traffic, one partition per UTC day.

`layout` is the catalogue of partitioned tables and how their partitions are named;
`convert` turns a table of the previous shape into a partitioned one, online.
"""
