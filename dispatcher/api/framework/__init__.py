"""The API's framework: routing and the route record, credentials, errors and bodies,
query models, pagination, the OpenAPI document. Nothing here names a resource."""
