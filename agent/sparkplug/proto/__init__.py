"""The Sparkplug B schema (`sparkplug_b.proto`) and the module protoc generates from it
(`sparkplug_b_pb2`, checked in; `regenerate.py` writes it again with the pinned generator)."""
