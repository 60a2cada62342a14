"""dht: a Dynamo-style distributed key-value store on asyncio, aiohttp and LevelDB."""
