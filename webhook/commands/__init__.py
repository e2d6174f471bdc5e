"""The entry points: one module per CLI verb (`placer serve | certs | apply | lint | test | export | dev`,
`kubectl placer explain | drift | shares`), each parsing its flags and making one call into the layers below.

May import every other package of `webhook`; nothing imports it.
"""
