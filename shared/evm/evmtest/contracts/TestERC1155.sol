// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

interface IERC1155Receiver {
    function onERC1155Received(address operator, address from, uint256 id, uint256 value, bytes calldata data)
        external
        returns (bytes4);

    function onERC1155BatchReceived(
        address operator,
        address from,
        uint256[] calldata ids,
        uint256[] calldata values,
        bytes calldata data
    ) external returns (bytes4);
}

/// @title TestERC1155: a minimal ERC-1155 for tests. Anyone may mint.
contract TestERC1155 {
    mapping(uint256 => mapping(address => uint256)) public balanceOf;
    mapping(address => mapping(address => bool)) public isApprovedForAll;

    event TransferSingle(
        address indexed operator, address indexed from, address indexed to, uint256 id, uint256 value
    );
    event TransferBatch(
        address indexed operator, address indexed from, address indexed to, uint256[] ids, uint256[] values
    );
    event ApprovalForAll(address indexed account, address indexed operator, bool approved);

    function supportsInterface(bytes4 id) external pure returns (bool) {
        return id == 0x01ffc9a7 || id == 0xd9b67a26; // ERC-165, ERC-1155
    }

    function balanceOfBatch(address[] calldata accounts, uint256[] calldata ids)
        external
        view
        returns (uint256[] memory balances)
    {
        require(accounts.length == ids.length, "ERC1155: length mismatch");
        balances = new uint256[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) {
            balances[i] = balanceOf[ids[i]][accounts[i]];
        }
    }

    function setApprovalForAll(address operator, bool approved) external {
        isApprovedForAll[msg.sender][operator] = approved;
        emit ApprovalForAll(msg.sender, operator, approved);
    }

    function mint(address to, uint256 id, uint256 value, bytes calldata data) external {
        require(to != address(0), "ERC1155: mint to the zero address");
        balanceOf[id][to] += value;
        emit TransferSingle(msg.sender, address(0), to, id, value);
        _checkSingle(address(0), to, id, value, data);
    }

    function safeTransferFrom(address from, address to, uint256 id, uint256 value, bytes calldata data) external {
        _authorize(from, to);
        _move(from, to, id, value);
        emit TransferSingle(msg.sender, from, to, id, value);
        _checkSingle(from, to, id, value, data);
    }

    function safeBatchTransferFrom(
        address from,
        address to,
        uint256[] calldata ids,
        uint256[] calldata values,
        bytes calldata data
    ) external {
        require(ids.length == values.length, "ERC1155: length mismatch");
        _authorize(from, to);
        for (uint256 i = 0; i < ids.length; i++) {
            _move(from, to, ids[i], values[i]);
        }
        emit TransferBatch(msg.sender, from, to, ids, values);
        if (to.code.length > 0) {
            require(
                IERC1155Receiver(to).onERC1155BatchReceived(msg.sender, from, ids, values, data)
                    == IERC1155Receiver.onERC1155BatchReceived.selector,
                "ERC1155: unsafe recipient"
            );
        }
    }

    function _authorize(address from, address to) internal view {
        require(to != address(0), "ERC1155: transfer to the zero address");
        require(from == msg.sender || isApprovedForAll[from][msg.sender], "ERC1155: not owner nor approved");
    }

    function _move(address from, address to, uint256 id, uint256 value) internal {
        uint256 have = balanceOf[id][from];
        require(have >= value, "ERC1155: insufficient balance");
        balanceOf[id][from] = have - value;
        balanceOf[id][to] += value;
    }

    function _checkSingle(address from, address to, uint256 id, uint256 value, bytes calldata data) internal {
        if (to.code.length > 0) {
            require(
                IERC1155Receiver(to).onERC1155Received(msg.sender, from, id, value, data)
                    == IERC1155Receiver.onERC1155Received.selector,
                "ERC1155: unsafe recipient"
            );
        }
    }
}
