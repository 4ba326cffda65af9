from .redis_stream import RedisStreamSpout

__all__ = ["RedisStreamSpout"]
