from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

ACCESS_ROLE_ADMIN: AccessRole
ACCESS_ROLE_OPERATOR: AccessRole
ACCESS_ROLE_READER: AccessRole
ACCESS_ROLE_SUBMITTER: AccessRole
ACCESS_ROLE_UNSPECIFIED: AccessRole
DESCRIPTOR: _descriptor.FileDescriptor
POLICY_FIELD_NUMBER: _ClassVar[int]
policy: _descriptor.FieldDescriptor

class MethodPolicy(_message.Message):
    __slots__ = ["answer_when_busy", "audited", "mutating", "role"]
    ANSWER_WHEN_BUSY_FIELD_NUMBER: _ClassVar[int]
    AUDITED_FIELD_NUMBER: _ClassVar[int]
    MUTATING_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    answer_when_busy: bool
    audited: bool
    mutating: bool
    role: AccessRole
    def __init__(self, role: _Optional[_Union[AccessRole, str]] = ..., mutating: bool = ..., audited: bool = ..., answer_when_busy: bool = ...) -> None: ...

class AccessRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
