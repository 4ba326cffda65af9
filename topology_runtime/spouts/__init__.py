from .redis_stream import RedisStreamReplaySpout, RedisStreamSpout

__all__ = ["RedisStreamReplaySpout", "RedisStreamSpout"]
